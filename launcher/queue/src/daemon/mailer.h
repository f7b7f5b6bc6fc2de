// Mail about jobs (--mail-type, --mail-user), handed to the local sendmail: whatever MTA Debian
// provides it (exim4, postfix, msmtp-mta, ...), as Slurm's MailProg. A mail never holds up the
// daemon or affects a job: the message goes to sendmail's standard input from a file, sendmail is
// not waited for (its exit is reaped with the daemon's other children), and a failure to start it
// is logged with the job's id.
#pragma once

#include <cstdint>
#include <string>

#include "gpurun/common/posix.h"

namespace gpurun::queue {

// `text` in a file under `dir` that is already unlinked, at offset 0: a child's standard input
// that nothing is left of, whatever happens to the child (sendmail, MPS's control tool). Throws
// std::runtime_error naming the file.
common::Fd unlinked_input(const std::string& dir, const std::string& text);

struct Mail {
  std::string to;       // an address checked by is_mail_address(), or a local user's name
  std::string subject;  // one line: control characters are escaped here
  std::string body;
};

class Mailer {
 public:
  // `sendmail`: the program (gpuq daemon --sendmail); `scratch_dir`: where a message waits for it.
  Mailer(std::string sendmail, std::string scratch_dir);
  // Hands `m` to sendmail; false (and a line in the daemon's log) when it could not be started.
  bool send(const Mail& m, int64_t job_id) const;

 private:
  std::string sendmail_, scratch_dir_;
};

}  // namespace gpurun::queue
