// env_test.cc: gpuq reads its environment into one struct (launcher/queue/src/client/env.h): empty values
// count as unset, GPUQ_RETRY_SECONDS must be a number, and the whole environment is kept for
// `gpuq submit`.
#include "client/env.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace gpurun::queue {
namespace {

TEST(QueueEnv, ReadsItsVariablesAndKeepsTheRest) {
  QueueEnv q = queue_env_from({{"GPUQ_SOCKET", "/tmp/q.sock"},
                               {"GPUQ_RETRY_SECONDS", "2.5"},
                               {"XDG_RUNTIME_DIR", ""},
                               {"HOME", "/home/alice"},
                               {"OTHER", "x"}});
  EXPECT_EQ(q.socket.value_or(""), "/tmp/q.sock");
  EXPECT_DOUBLE_EQ(q.retry_seconds, 2.5);
  EXPECT_FALSE(q.runtime_dir.has_value()) << "an empty XDG_RUNTIME_DIR is unset";
  EXPECT_FALSE(q.state_home.has_value());
  EXPECT_EQ(q.home.value_or(""), "/home/alice");
  EXPECT_EQ(q.all.at("OTHER"), "x");
  EXPECT_DOUBLE_EQ(queue_env_from({}).retry_seconds, 0);
}

TEST(QueueEnv, BadRetrySecondsNameTheVariable) {
  for (const char* bad : {"soon", "1x", "-3"}) {
    try {
      queue_env_from({{"GPUQ_RETRY_SECONDS", bad}});
      FAIL() << bad << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("GPUQ_RETRY_SECONDS"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace gpurun::queue
