// test_control.cc: the supervisor <-> wrapper control protocol (launcher/src/control.h): every
// message survives encode + parse, fields with spaces and newlines stay one field, malformed
// lines are refused, unknown tags and extra trailing fields are tolerated.
#include <gtest/gtest.h>

#include "control.h"

namespace gpurun::launcher::control {
namespace {

template <class M, class V>
M round_trip(const M& m, std::optional<V> (*parse)(std::string_view)) {
  std::string line = encode(m);
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "one message is one line: " << line;
  line.pop_back();
  auto p = parse(line);
  EXPECT_TRUE(p.has_value()) << line;
  EXPECT_TRUE(std::holds_alternative<M>(*p)) << line;
  return std::get<M>(*p);
}

TEST(Control, HelloRoundTrip) {
  Hello h{"0123abcd", 3, "node2", 4242};
  EXPECT_EQ(encode(h), "HELLO 0123abcd 3 node2 4242\n");
  Hello back = round_trip(h, parse_to_supervisor);
  EXPECT_EQ(back.token, "0123abcd");
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.host, "node2");
  EXPECT_EQ(back.pid, 4242);
}

TEST(Control, ExitRoundTripKeepsSeconds) {
  Exit e = round_trip(Exit{7, 3, 9, 12.375}, parse_to_supervisor);
  EXPECT_EQ(e.rank, 7);
  EXPECT_EQ(e.code, 3);
  EXPECT_EQ(e.signal, 9);
  EXPECT_DOUBLE_EQ(e.seconds, 12.375);
}

TEST(Control, WrapperMessages) {
  EXPECT_EQ(encode(Stop{}), "STOP\n");
  EXPECT_EQ(encode(Signal{10}), "SIG 10\n");
  EXPECT_EQ(round_trip(Signal{15}, parse_to_wrapper).signal, 15);
  round_trip(Stop{}, parse_to_wrapper);
}

TEST(Control, WordsWithSpacesNewlinesAndPercentStayOneField) {
  for (std::string host : {"a b", "x\ny", "100%", "", "%", "tab\there", "caf\xc3\xa9"}) {
    Hello back = round_trip(Hello{"t", 0, host, 1}, parse_to_supervisor);
    EXPECT_EQ(back.host, host);
  }
}

TEST(Control, TextEscapingKeepsSpacesReadable) {
  EXPECT_EQ(escape_text("a b%c\nd\r"), "a b%25c%0Ad%0D");
  EXPECT_EQ(unescape(escape_text("a b%c\nd\r")).value(), "a b%c\nd\r");
  EXPECT_EQ(escape_word("a b"), "a%20b");
  EXPECT_EQ(escape_word(""), "%");
  EXPECT_FALSE(unescape("bad%2").has_value());
  EXPECT_FALSE(unescape("bad%zz").has_value());
}

TEST(Control, MalformedLinesAreRefused) {
  for (const char* bad : {"HELLO", "HELLO tok x node 1", "HELLO tok 1 node", "EXIT 1 2 3",
                          "EXIT 1 2 3 abc", "HELLO tok 1 node 1x", "HELLO  tok 1 node 1", "SIG",
                          "SIG ten", "EXIT 1 2 3 4.5e", "HELLO tok 1 no%2 1"}) {
    EXPECT_FALSE(parse_to_supervisor(bad).has_value() && parse_to_wrapper(bad).has_value()) << bad;
    EXPECT_FALSE(parse_to_supervisor(bad).has_value()) << bad;
  }
  EXPECT_FALSE(parse_to_wrapper("SIG ten").has_value());
  EXPECT_FALSE(parse_to_wrapper("").has_value());
}

TEST(Control, UnknownTagsAreNotParsedAndExtraFieldsAreIgnored) {
  EXPECT_FALSE(parse_to_supervisor("BOGUS 1 2").has_value());
  EXPECT_FALSE(parse_to_wrapper("HELLO t 1 h 2").has_value()) << "HELLO goes the other way";
  auto m = parse_to_supervisor("EXIT 1 0 0 2.5 newer-field 7");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(std::get<Exit>(*m).seconds, 2.5);
}

}  // namespace
}  // namespace gpurun::launcher::control
