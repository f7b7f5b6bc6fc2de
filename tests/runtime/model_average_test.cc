// model_average_test.cc: local SGD's averages (runtime/src/cpu/model_average.h) on 2 ranks under
// mpirun, where the values are chosen so every sum is exact (multiples of 1/8 near 1: exact in
// bfloat16 too) and the expected parameters are known:
// - at once: every rank leaves with the mean, and the statistics summed;
// - overlapped: a partway average is only started (the parameters as they were, the previous
//   sync's progress returned: none at the first); at the next sync each rank's parameters move
//   by the mean change less its own, so its steps since stay; a settling sync leaves every rank
//   with the same parameters and both syncs' progress; a stop that arrives partway settles too;
// - an epoch's end overlapped (SyncAt::kEpochEnd): started as partway; land() applies it with its
//   progress before the next sync, and the average it made can be swapped in (for the epoch's
//   evaluation) and out again; land() with nothing in flight is refused.
// Each case in float and in bfloat16. Run alone (one rank) it checks that nothing moves.
#include "cpu/model_average.h"

#include <cmath>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpurun/runtime/process_group.h"

namespace rt = gpurun::runtime;

namespace {

constexpr std::size_t kN = 1000;
int failures = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  ++failures;
}

// Every parameter equals v.
void expect_all(const std::vector<float>& p, float v, const std::string& what) {
  for (float x : p) {
    if (x != v)
      return expect(false, what + ": " + std::to_string(x) + ", expected " + std::to_string(v));
  }
}

rt::Progress progress(int steps, double loss, bool stop = false) {
  rt::Progress p;
  p.steps = steps;
  p.loss_sum = loss;
  p.correct = steps;
  p.stop = stop;
  for (int i = 0; i < steps; ++i) p.rank_losses.push_back(loss / steps);
  return p;
}

// Rank r's change in each of two rounds of steps (exact in bfloat16), and their means over the
// ranks.
struct Changes {
  float own1, own2, mean1, mean2;
};

Changes changes(const rt::ProcessGroup& pg) {
  const int r = pg.rank(), w = pg.size();
  return {0.5f * float(r + 1), 0.25f * float(r + 1), 0.5f * float(w + 1) / 2.0f,
          0.25f * float(w + 1) / 2.0f};
}

// An overlapped average of kN parameters, every rank's 1 at the start, and those parameters.
struct Overlapped {
  Overlapped(rt::ProcessGroup& pg, bool bf16) : avg(pg, 4, kN, bf16, true) { avg.reset(p.data()); }
  std::vector<float> p = std::vector<float>(kN, 1.0f);
  rt::cpu::ModelAverage avg;
};

void at_once(rt::ProcessGroup& pg, bool bf16) {
  const std::string how = std::string("at once, ") + (bf16 ? "bf16" : "float");
  const int r = pg.rank(), w = pg.size();
  std::vector<float> p(kN, 1.0f);
  rt::cpu::ModelAverage avg(pg, 4, kN, bf16, false);
  avg.reset(p.data());
  p.assign(kN, 1.0f + 0.5f * float(r + 1));  // each rank's 4 steps
  rt::Progress pr = progress(4, 1.0 + r);
  avg.average(p.data(), pr, rt::SyncAt::kPartway);
  const float mean = 1.0f + 0.5f * float(w + 1) / 2.0f;
  expect_all(p, w == 1 ? 1.5f : mean, how + ": the parameters after an average");
  expect(pr.steps == 4 && pr.loss_sum == (w == 1 ? 1.0 : 3.0) && pr.correct == 4.0 * w,
         how + ": the statistics summed");
}

void overlapped(rt::ProcessGroup& pg, bool bf16, bool stop_partway) {
  const std::string how = std::string("overlapped, ") + (bf16 ? "bf16" : "float") +
                          (stop_partway ? ", a stop partway" : "");
  const int r = pg.rank(), w = pg.size();
  const auto [own1, own2, mean1, mean2] = changes(pg);
  Overlapped start(pg, bf16);
  auto& [p, avg] = start;

  // Sync 1, partway: started only; nothing came before it.
  p.assign(kN, 1.0f + own1);
  rt::Progress pr = progress(4, 1.0 + r, stop_partway && r == 1);
  avg.average(p.data(), pr, rt::SyncAt::kPartway);
  for (int i = 0; i < 3; ++i) avg.progress();
  if (w == 1) {  // alone: nothing to average, the progress as it was
    expect_all(p, 1.0f + own1, how + ": alone, the parameters after sync 1");
    expect(pr.steps == 4 && pr.loss_sum == 1.0, how + ": alone, sync 1's progress");
    return;
  }
  expect_all(p, 1.0f + own1, how + ": sync 1 left the parameters as they were");
  expect(pr.steps == 0 && pr.rank_losses.empty() && !pr.stop, how + ": sync 1 reported nothing");

  // Four more steps, then sync 2, partway: sync 1's average arrives.
  for (float& x : p) x += own2;
  pr = progress(4, 10.0);
  avg.average(p.data(), pr, rt::SyncAt::kPartway);
  if (stop_partway) {  // sync 1 carried rank 1's stop: sync 2 settles, with both syncs' progress
    expect(pr.stop && pr.steps == 8 && pr.rank_losses.size() == 8, how + ": the stop, settled");
    expect(pr.loss_sum == 3.0 + 20.0, how + ": both syncs' losses summed");
    expect_all(p, 1.0f + mean1 + mean2, how + ": every rank's parameters the mean");
    return;
  }
  expect_all(p, 1.0f + mean1 + own2, how + ": sync 2 applied sync 1's mean, kept the rank's own");
  expect(pr.steps == 4 && pr.loss_sum == 3.0 && pr.correct == 8.0 && !pr.stop &&
             pr.rank_losses.size() == 4 && pr.rank_losses[0] == (1.0 + r) / 4,
         how + ": sync 2 reported sync 1's progress, summed");

  // Four more steps, then sync 3 settles: sync 2's average arrives, and every rank leaves with
  // the mean of their parameters now, reporting syncs 2 and 3.
  const float own3 = 0.125f * float(r + 1), mean3 = 0.125f * float(w + 1) / 2.0f;
  for (float& x : p) x += own3;
  pr = progress(4, 100.0);
  avg.average(p.data(), pr, rt::SyncAt::kSettle);
  expect_all(p, 1.0f + mean1 + mean2 + mean3, how + ": a settling sync left every rank the mean");
  expect(pr.steps == 8 && pr.loss_sum == 20.0 + 200.0 && pr.rank_losses.size() == 8,
         how + ": the settling sync reported syncs 2 and 3");

  // And the next partway change starts from the settled average.
  for (float& x : p) x += own1;
  pr = progress(4, 1.0);
  avg.average(p.data(), pr, rt::SyncAt::kPartway);
  pr = progress(0, 0.0);
  avg.average(p.data(), pr, rt::SyncAt::kSettle);
  expect_all(p, 1.0f + mean1 + mean2 + mean3 + mean1,
             how + ": the next average, from the settled one");
}

void epoch_end(rt::ProcessGroup& pg, bool bf16) {
  const std::string how = std::string("an epoch's end overlapped, ") + (bf16 ? "bf16" : "float");
  const int r = pg.rank(), w = pg.size();
  const auto [own1, own2, mean1, mean2] = changes(pg);
  Overlapped start(pg, bf16);
  auto& [p, avg] = start;
  p.assign(kN, 1.0f + own1);
  rt::Progress pr = progress(4, 1.0 + r);
  avg.average(p.data(), pr, rt::SyncAt::kEpochEnd);
  if (w == 1) {
    expect_all(p, 1.0f + own1, how + ": alone, the parameters as they were");
    return expect(pr.steps == 4 && pr.loss_sum == 1.0, how + ": alone, the progress as it was");
  }
  expect_all(p, 1.0f + own1, how + ": the epoch's end only started its average");
  expect(pr.steps == 0 && !pr.stop, how + ": the epoch's end reported nothing yet");

  // The next epoch's first steps, then the landing: the epoch's steps' progress, summed.
  for (float& x : p) x += own2;
  pr = avg.land(p.data());
  expect(pr.steps == 4 && pr.loss_sum == 3.0 && pr.correct == 8.0 && pr.rank_losses.size() == 4,
         how + ": landed, the epoch's last steps' progress summed");
  expect_all(p, 1.0f + mean1 + own2, how + ": landed, the mean applied, the rank's own kept");
  avg.swap_with_average(p.data());
  expect_all(p, 1.0f + mean1, how + ": swapped in, the epoch's end's average");
  avg.swap_with_average(p.data());
  expect_all(p, 1.0f + mean1 + own2, how + ": swapped out, the rank's own again");
  bool refused = false;
  try {
    avg.land(p.data());
  } catch (const std::logic_error&) {
    refused = true;
  }
  expect(refused, how + ": a second landing refused");

  // The next sync starts from the landed average: settled, every rank has the mean.
  pr = progress(4, 10.0);
  avg.average(p.data(), pr, rt::SyncAt::kSettle);
  expect_all(p, 1.0f + mean1 + mean2, how + ": settled after the landing, the mean");
  expect(pr.steps == 4 && pr.loss_sum == 20.0, how + ": the settling sync, its own progress only");
}

}  // namespace

int main() {
  try {
    auto pg = rt::make_process_group();
    for (bool bf16 : {false, true}) {
      at_once(*pg, bf16);
      overlapped(*pg, bf16, false);
      overlapped(*pg, bf16, true);
      epoch_end(*pg, bf16);
    }
    std::printf("rank %d of %d: %d failures\n", pg->rank(), pg->size(), failures);
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "model_average_test: %s\n", e.what());
    return 1;
  }
}
