// Pins common/strings.h's percent encoding, the one escaping of the project's line formats: every
// byte survives a round trip, only '%' and what the caller names is escaped, and a bad escape is
// refused rather than guessed.
#include "gpurun/common/strings.h"

#include <gtest/gtest.h>

#include <string>

namespace gpurun::common {
namespace {

bool space_or_control(unsigned char u) {
  return u <= 0x20 || u == 0x7f;
}
bool nothing(unsigned char) {
  return false;
}

TEST(PercentEncode, EscapesPercentAndWhatTheCallerNames) {
  EXPECT_EQ(percent_encode("a b%c\nd", space_or_control), "a%20b%25c%0Ad");
  EXPECT_EQ(percent_encode("a b%c", nothing), "a b%25c");
  EXPECT_EQ(percent_encode("", nothing), "");
}

TEST(PercentEncode, EveryByteRoundTrips) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const std::string line = percent_encode(all, space_or_control);
  for (char c : line) EXPECT_FALSE(space_or_control(static_cast<unsigned char>(c)));
  EXPECT_EQ(percent_decode(line), all);
  EXPECT_EQ(percent_decode(percent_encode(all, nothing)), all);
}

TEST(PercentDecode, RefusesBadEscapes) {
  EXPECT_EQ(percent_decode("%41%2f"), "A/");
  for (const char* bad : {"%", "%4", "a%zz", "%4g", "x%-1"}) {
    EXPECT_FALSE(percent_decode(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace gpurun::common
