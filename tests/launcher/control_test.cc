// control_test.cc: the supervisor <-> wrapper control protocol (launcher/src/control/control.h): every
// message survives encode + parse, fields with spaces and newlines stay one field, malformed
// lines are refused, unknown tags and extra trailing fields are tolerated.
#include <gtest/gtest.h>

#include "control/control.h"

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

// A node relay's connection (control.h, "Relays"): RELAY first, then each line framed with its
// rank; a frame's body is the message line unchanged, or "-" (that rank's connection ended).
TEST(Control, RelayFramesCarryTheRankAndTheMessageUnchanged) {
  RelayHello h = round_trip(RelayHello{"tok", "node 7", 99}, parse_to_supervisor);
  EXPECT_EQ(h.host, "node 7");
  const std::string line = encode(Output{2, 0, Text{"a b  c"}});
  const std::string framed = frame(131071, line);
  EXPECT_EQ(framed, "131071 " + line);
  auto f = parse_frame(std::string_view(framed).substr(0, framed.size() - 1));
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->rank, 131071);
  auto m = parse_to_supervisor(f->body);
  ASSERT_TRUE(m && std::holds_alternative<Output>(*m));
  EXPECT_EQ(std::get<Output>(*m).text.value, "a b  c");
  auto closed = parse_frame("3 -");
  ASSERT_TRUE(closed.has_value());
  EXPECT_EQ(closed->body, kClosed);
}

TEST(Control, MalformedFramesAreRefused) {
  for (const char* bad : {"", "3", "3 ", " GO", "-1 GO", "x GO", "3x GO", "* GO", "99999999999 GO"})
    EXPECT_FALSE(parse_frame(bad).has_value()) << "'" << bad << "'";
}

TEST(Control, RelaySocketNamesAreAbstractBoundedAndPerNode) {
  const std::string a = relay_socket_name("tok", "node1"), b = relay_socket_name("tok", "node2");
  EXPECT_EQ(a[0], '@');
  EXPECT_NE(a, b);
  EXPECT_NE(a, relay_socket_name("tok2", "node1"));
  EXPECT_LE(relay_socket_name(std::string(64, 't'), std::string(255, 'h')).size(), 100u);
}

TEST(Control, ExitRoundTripKeepsSecondsAndWhy) {
  Exit e = round_trip(Exit{3, 9, 12.375, {}}, parse_to_supervisor);
  EXPECT_EQ(e.code, 3);
  EXPECT_EQ(e.signal, 9);
  EXPECT_DOUBLE_EQ(e.seconds, 12.375);
  EXPECT_EQ(e.what.value, "");
  std::string why = "cannot run 'my prog': No such file or directory";
  EXPECT_EQ(round_trip(Exit{127, 0, 0, Text{why}}, parse_to_supervisor).what.value, why);
}

TEST(Control, RendezvousAndProgressMessages) {
  EXPECT_EQ(encode(Port{29500, 1}), "PORT 29500 1 0\n");
  EXPECT_EQ(round_trip(Port{29500, 1, 41234}, parse_to_supervisor).bw_port, 41234);
  Reach r = round_trip(Reach{0, "eth0", Text{"No route to host"}}, parse_to_supervisor);
  EXPECT_EQ(r.ok, 0);
  EXPECT_EQ(r.iface, "eth0");
  EXPECT_EQ(r.detail.value, "No route to host");
  round_trip(Running{}, parse_to_supervisor);
  EXPECT_EQ(round_trip(StepReport{1234567890123}, parse_to_supervisor).step, 1234567890123);
  EXPECT_EQ(round_trip(StepReport{-1}, parse_to_supervisor).step, -1);
}

// --preflight's answer: reasons one a line (newlines inside a word field), a figure, notes.
TEST(Control, PreflightCarriesReasonsFigureAndNotes) {
  std::string failures = "GPU 1 (rank 1): 2 uncorrected ECC errors\nTMPDIR /tmp has 5 MiB free";
  Preflight p =
      round_trip(Preflight{failures, 1234.5, Text{"a note\nanother"}}, parse_to_supervisor);
  EXPECT_EQ(p.failures, failures);
  EXPECT_DOUBLE_EQ(p.mb_per_s, 1234.5);
  EXPECT_EQ(p.notes.value, "a note\nanother");
  Preflight none = round_trip(Preflight{"", -1, Text{""}}, parse_to_supervisor);
  EXPECT_EQ(none.failures, "");
  EXPECT_DOUBLE_EQ(none.mb_per_s, -1);
  EXPECT_EQ(encode(Preflight{"", -1, Text{""}}), "PREFLIGHT % -1 \n");
}

TEST(Control, OutputAndStacksCarryAnyText) {
  std::string text = "epoch 1  loss 0.25%\nline two\r\n\ttabbed \x01 end";
  Output o = round_trip(Output{2, 1, Text{text}}, parse_to_supervisor);
  EXPECT_EQ(o.stream, 2);
  EXPECT_EQ(o.partial, 1);
  EXPECT_EQ(o.text.value, text);
  EXPECT_EQ(round_trip(Output{1, 0, Text{""}}, parse_to_supervisor).text.value, "");
  std::string stack = "=== process 1 (x) ===\n#0  0x1 main\n";
  EXPECT_EQ(round_trip(Stacks{Text{stack}}, parse_to_supervisor).text.value, stack);
}

TEST(Control, WrapperMessages) {
  EXPECT_EQ(encode(Stop{}), "STOP\n");
  EXPECT_EQ(encode(Signal{10}), "SIG 10\n");
  EXPECT_EQ(round_trip(Signal{15}, parse_to_wrapper).signal, 15);
  round_trip(Stop{}, parse_to_wrapper);
  round_trip(DumpStacks{}, parse_to_wrapper);
  round_trip(Bye{}, parse_to_wrapper);
  Bind b = round_trip(Bind{29500, 1}, parse_to_wrapper);
  EXPECT_EQ(b.port, 29500);
  EXPECT_EQ(b.fixed, 1);
  EXPECT_EQ(round_trip(Rendezvous{29501, 0}, parse_to_wrapper).check, 0);
  EXPECT_EQ(round_trip(Bind{29500, 0, 1}, parse_to_wrapper).bandwidth, 1);
  Rendezvous rv =
      round_trip(Rendezvous{29501, 1, 1, std::int64_t{1} << 40, 41234}, parse_to_wrapper);
  EXPECT_EQ(rv.preflight, 1);
  EXPECT_EQ(rv.min_tmp, std::int64_t{1} << 40);
  EXPECT_EQ(rv.bw_port, 41234);
  Go g = round_trip(Go{2, 1, "0-3:4-7"}, parse_to_wrapper);
  EXPECT_EQ(g.restart, 2);
  EXPECT_EQ(g.watch, 1);
  EXPECT_EQ(g.cpu_bind, "0-3:4-7");
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
  for (const char* bad :
       {"HELLO", "HELLO tok x node 1", "HELLO tok 1 node", "EXIT 1 2", "EXIT 1 2 abc ",
        "HELLO tok 1 node 1x", "HELLO  tok 1 node 1", "SIG", "SIG ten", "EXIT 1 2 4.5e ",
        "HELLO tok 1 no%2 1", "EXIT 1 2 3", "OUT 1 0", "OUT x 0 text", "OUT 1 0 bad%zz",
        "PROGRESS 99999999999999999999"}) {
    EXPECT_FALSE(parse_to_supervisor(bad).has_value() && parse_to_wrapper(bad).has_value()) << bad;
    EXPECT_FALSE(parse_to_supervisor(bad).has_value()) << bad;
  }
  EXPECT_FALSE(parse_to_wrapper("SIG ten").has_value());
  EXPECT_FALSE(parse_to_wrapper("").has_value());
}

// Issue 26, item 7: a signal number is range-checked before it becomes a signal (4294967305
// would wrap to 9 in an int; 0 or 65 reach kill() as nonsense), an exit code before 128 + it.
TEST(Control, SignalNumbersOutOfRangeAreRefused) {
  for (const char* bad : {"SIG 0", "SIG 65", "SIG -9", "SIG 4294967305", "SIG 2147483647"})
    EXPECT_FALSE(parse_to_wrapper(bad).has_value()) << bad;
  ASSERT_TRUE(parse_to_wrapper("SIG 64").has_value());
  EXPECT_EQ(std::get<Signal>(*parse_to_wrapper("SIG 10")).signal, 10);
  for (const char* bad : {"EXIT 0 65 1 %", "EXIT 0 -1 1 %", "EXIT 256 0 1 %", "EXIT -1 0 1 %"})
    EXPECT_FALSE(parse_to_supervisor(bad).has_value()) << bad;
  EXPECT_TRUE(parse_to_supervisor("EXIT 0 9 1 %").has_value());
}

TEST(Control, UnknownTagsAreNotParsedAndExtraFieldsAreIgnored) {
  EXPECT_FALSE(parse_to_supervisor("BOGUS 1 2").has_value());
  EXPECT_FALSE(parse_to_wrapper("HELLO t 1 h 2").has_value()) << "HELLO goes the other way";
  auto m = parse_to_supervisor("PORT 29500 1 0 newer-field 7");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(std::get<Port>(*m).port, 29500);
}

}  // namespace
}  // namespace gpurun::launcher::control
