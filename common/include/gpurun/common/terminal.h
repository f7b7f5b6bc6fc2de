// terminal.h: text that came from a user or the environment (host names, job ids, program names,
// variables' values), made safe to print on a terminal: a control character in it could move the
// cursor, rewrite a line or forge one of gpurun's own ("\e[2K\rgpurun: all ranks finished").
#pragma once

#include <string>
#include <string_view>

namespace gpurun::common {

// `s` with every ASCII control character (0x00-0x1f, 0x7f) written as an escape: \e \n \r \t \0
// and \xNN for the others. Well-formed UTF-8 passes (names stay readable) except C1 controls
// (U+0080-U+009F) and the bidirectional formatting characters (U+061C, U+200E, U+200F,
// U+202A-U+202E, U+2066-U+2069: written \uXXXX); any other byte from 0x80 up is written \xNN.
// Escaping escaped text changes nothing (a backslash is kept), so a word escaped where it enters a
// message may be escaped again where the message is printed. gpurun and gpuq print every
// user-controlled word through it.
std::string escape_control(std::string_view s);

// The same, but '\n' is kept: for text whose lines are gpurun's own (a multi-line error's
// detail, a table), where the fields that a user controls were escaped when put in.
std::string escape_control_keep_lines(std::string_view s);

}  // namespace gpurun::common
