// terminal.h: user-controlled text made safe to print on a terminal. A job name, user or path
// that holds ESC, CR or other control characters would otherwise drive the reader's terminal
// (move the cursor, rewrite lines, set its title): they are shown escaped, as `ls -b` does.
#pragma once

#include <string>
#include <string_view>

namespace gpurun::common {

// ESC -> \e, CR -> \r, LF -> \n, TAB -> \t, NUL -> \0, a backslash -> \\, other C0 controls and
// DEL -> \xNN, and the C1 controls U+0080-U+009F (0xC2 0x80-0x9F in UTF-8, which terminals obey
// like ESC sequences) -> \u0080 ... \u009f. Everything else is kept as it is.
std::string terminal_safe(std::string_view text);

}  // namespace gpurun::common
