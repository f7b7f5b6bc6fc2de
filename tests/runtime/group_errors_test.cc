// group_errors_test.cc: agree_on_errors / run_agreed (process_group.h) under `mpirun -n 3` and as
// one plain process: an error on every rank, on one rank, on two, and on none; every rank must
// end with the same GroupError text (or none), and the group must still work afterwards (no rank
// left behind in a collective).
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

#include "gpurun/runtime/process_group.h"

namespace rt = gpurun::runtime;

namespace {

// What run_agreed threw on this rank ("" for nothing).
std::string outcome(rt::ProcessGroup& pg, bool fail, const std::string& why) {
  try {
    rt::run_agreed(pg, [&] {
      if (fail) throw std::runtime_error(why);
    });
    return "";
  } catch (const rt::GroupError& e) {
    return e.what();
  }
}

int check(const char* what, const std::string& got, const std::string& want, int rank) {
  if (got == want) return 0;
  std::fprintf(stderr, "rank %d, %s: got '%s', want '%s'\n", rank, what, got.c_str(), want.c_str());
  return 1;
}

}  // namespace

int main() {
  auto pg = rt::make_process_group();
  const int r = pg->rank(), w = pg->size();
  int wrong = 0;
  // Every rank fails: rank 0's words, as they are.
  wrong += check("all fail", outcome(*pg, true, "bad file on rank " + std::to_string(r)),
                 "bad file on rank 0", r);
  // Nobody fails.
  wrong += check("none fail", outcome(*pg, false, ""), "", r);
  if (w >= 2) {
    // Only the last rank fails: every rank learns it, with who and where.
    const std::string got = outcome(*pg, r == w - 1, "no such file");
    const std::string head = "rank " + std::to_string(w - 1) + " of " + std::to_string(w) + " on ";
    if (got.rfind(head, 0) != 0 || got.find(": no such file") == std::string::npos) {
      wrong += check("last fails", got, head + "HOST: no such file", r);
    }
  }
  if (w >= 3) {
    // Ranks 1 and 2 of 3: rank 1's words, and the count of the others.
    const std::string got = outcome(*pg, r >= 1, "rank " + std::to_string(r) + " failed");
    if (got.find("rank 1 failed (and 1 other rank)") == std::string::npos) {
      wrong += check("two fail", got, "rank 1 of 3 on HOST: rank 1 failed (and 1 other rank)", r);
    }
  }
  double one = 1;
  pg->allreduce_sum(&one, 1);  // the group still works
  wrong += check("allreduce after", std::to_string(int(one)), std::to_string(w), r);
  std::printf("rank %d of %d: %d wrong\n", r, w, wrong);
  return wrong == 0 ? 0 : 1;
}
