// Plain driver for gpurun's fuzz targets (the #SBATCH parser, nvidia-smi's CSV), for CI without
// libFuzzer: runs every file of a corpus directory, then N random mutations of them (seeded, so a
// failure is reproducible). Each target names the bytes worth inserting (FuzzAlphabet).
//   fuzz_TARGET CORPUS_DIR [ITERATIONS] [SEED]
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" const char* FuzzAlphabet();  // defined by each target

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [ITERATIONS] [SEED]\n", argv[0]);
    return 2;
  }
  long iterations = argc > 2 ? std::atol(argv[2]) : 20000;
  unsigned seed = argc > 3 ? static_cast<unsigned>(std::atol(argv[3])) : 12345u;
  std::vector<std::string> corpus;
  for (const auto& e : std::filesystem::directory_iterator(argv[1])) {
    std::ifstream in(e.path(), std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    corpus.push_back(ss.str());
  }
  if (corpus.empty()) {
    std::fprintf(stderr, "%s: corpus %s is empty\n", argv[0], argv[1]);
    return 2;
  }
  for (const auto& c : corpus)
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(c.data()), c.size());
  std::mt19937 rng(seed);
  const std::string alphabet = FuzzAlphabet();
  for (long i = 0; i < iterations; ++i) {
    std::string s = corpus[rng() % corpus.size()];
    int edits = 1 + rng() % 8;
    for (int k = 0; k < edits; ++k) {
      size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
      switch (rng() % 4) {
        case 0:
          s.insert(pos, 1, alphabet[rng() % alphabet.size()]);
          break;
        case 1:
          if (pos < s.size()) s.erase(pos, 1 + rng() % 4);
          break;
        case 2:
          if (pos < s.size()) s[pos] = static_cast<char>(rng() % 256);
          break;
        case 3:
          s.insert(pos, corpus[rng() % corpus.size()].substr(0, 40));
          break;
      }
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  std::printf("%s: %zu corpus files, %ld mutations, seed %u: no crash\n", argv[0], corpus.size(),
              iterations, seed);
  return 0;
}
