// Pins gpuq's request decoder (request.h): every field checked for type and range before the
// daemon acts, numbers compared as the JSON numbers they are (no wrap-around), and the bounds on
// one request (ids, values, nesting); also the terminal-safe text every listing prints and the
// array shape behind SLURM_ARRAY_TASK_MIN/MAX/COUNT/STEP.
#include "job/request.h"

#include <gtest/gtest.h>

#include <string>

#include "gpurun/common/terminal.h"
#include "gpurun/queue/job.h"

using namespace gpurun::queue;

namespace {
std::string error_of(const std::string& text) {
  try {
    decode_request(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Request, DecodesEachOpsFields) {
  Request r = decode_request(R"({"op":"cancel","ids":["12","12_3",7],"signal":10})");
  EXPECT_EQ(r.op, Op::kCancel);
  ASSERT_EQ(r.ids.size(), 3u);
  EXPECT_EQ(r.ids[1].id, 12);
  EXPECT_EQ(r.ids[1].task, 3);
  EXPECT_EQ(r.ids[2].id, 7);
  EXPECT_EQ(r.signal, 10);
  r = decode_request(R"({"op":"submit","script":"#!/bin/sh\n","cwd":"/w","umask":63,
                         "env":{"A":"1"},"options":["-J","x"],"args":["a"]})");
  EXPECT_EQ(r.submit.umask, 077u);
  EXPECT_EQ(r.submit.env.at("A"), "1");
  EXPECT_EQ(r.submit.options.size(), 2u);
  r = decode_request(R"({"op":"history","limit":5,"all_users":true,"user":"bob"})");
  EXPECT_EQ(r.limit, 5u);
  EXPECT_EQ(r.user, "bob");
}

// 4294967305 = 2^32 + 9: a cast to int first made it SIGKILL.
TEST(Request, NumbersAreRangeCheckedBeforeAnyCast) {
  for (const char* bad : {"4294967305", "18446744073709551615", "-1", "65", "9.5", "\"9\""})
    EXPECT_NE(error_of(std::string(R"({"op":"cancel","ids":["1"],"signal":)") + bad + "}")
                  .find("request field 'signal': expected an integer from 0 to 64, got " +
                        std::string(bad)),
              std::string::npos)
        << bad;
  EXPECT_NE(error_of(R"({"op":"status","recent":1000000})").find("'recent'"), std::string::npos);
  EXPECT_NE(error_of(R"({"op":"submit","script":"x","umask":512})").find("'umask'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"op":"report","since_ms":-5})").find("'since_ms'"), std::string::npos);
}

TEST(Request, OneRequestIsBounded) {
  std::string ids = R"({"op":"show","ids":[)";
  for (int i = 0; i < 10001; ++i) ids += i ? ",1" : "1";
  EXPECT_NE(error_of(ids + "]}")
                .find("the request names 10001 jobs: one request may name at most 10000 jobs"),
            std::string::npos);
  std::string values = R"({"op":"ping","x":[)";
  for (int i = 0; i < 100001; ++i) values += i ? ",0" : "0";
  EXPECT_NE(error_of(values + "]}").find("more than 100000 JSON values"), std::string::npos);
  EXPECT_NE(error_of(std::string(R"({"op":"ping","x":)") + std::string(40, '[') +
                     std::string(40, ']') + "}")
                .find("nested deeper than 32 levels"),
            std::string::npos);
}

TEST(Request, MalformedRequestsSayWhat) {
  EXPECT_NE(error_of("{not json").find("malformed request"), std::string::npos);
  // Found by gpuq_fuzz_request: nlohmann throws out_of_range, not parse_error, for this number.
  EXPECT_NE(error_of(R"({"op":7775555555e7777777555})").find("malformed request"),
            std::string::npos);
  EXPECT_NE(error_of("[1]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"op":"fly"})").find("unknown request op \"fly\""), std::string::npos);
  EXPECT_NE(error_of(R"({"op":"show","ids":["1_x"]})").find("invalid job id '1_x'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"op":"show"})").find("'ids'"), std::string::npos);
  EXPECT_NE(error_of(R"({"op":"submit"})").find("'script'"), std::string::npos);
  EXPECT_NE(error_of(R"({"op":"submit","script":"x","env":{"A":1}})").find("'env'"),
            std::string::npos);
}

TEST(Terminal, ControlCharactersAreEscaped) {
  using gpurun::common::escape_control;
  EXPECT_EQ(escape_control("plain name-1.0 caf\xc3\xa9"), "plain name-1.0 caf\xc3\xa9");
  EXPECT_EQ(escape_control(std::string("a\x1b[31mb\rc\nd\te\0f\\g\x7f\x01", 19)),
            "a\\e[31mb\\rc\\nd\\te\\0f\\g\\x7f\\x01");
  EXPECT_EQ(escape_control("x\xc2\x9b"
                          "31m"),
            "x\\xc2\\x9b31m");  // C1 CSI in UTF-8
}

TEST(Job, ArrayShapeAsSlurmDescribesIt) {
  auto a = array_shape({0, 4, 8, 12});
  EXPECT_EQ(a.min, 0);
  EXPECT_EQ(a.max, 12);
  EXPECT_EQ(a.count, 4);
  EXPECT_EQ(a.step, 4);
  EXPECT_EQ(array_shape({7, 1, 3}).step, 1);  // uneven: 1
  EXPECT_EQ(array_shape({5}).count, 1);
}
