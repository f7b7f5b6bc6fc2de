// checkpoint_writer: rewrites DIR's checkpoint over and over, as fast as it can, so that a kill -9
// from a test lands in the middle of a write (custom_data_e2e_test.sh checkpoint_kill).
//   checkpoint_writer DIR
// Prints "written" once the first rewrite is in place; never returns on its own.
#include <cstdio>
#include <exception>

#include "train/checkpoint.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: checkpoint_writer DIR\n");
    return 2;
  }
  namespace rt = gpurun::runtime;
  try {
    rt::Checkpoint c = rt::load_checkpoint(rt::checkpoint_path(argv[1]));
    for (long n = 0;; ++n) {
      rt::save_checkpoint(argv[1], c);
      if (n == 0) {
        std::printf("written\n");
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_writer: %s\n", e.what());
    return 1;
  }
}
