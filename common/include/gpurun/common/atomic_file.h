// atomic_file.h: a file written whole or not at all, and the temp files that say whose they are.
// A temp file is "PATH.tmp.BOOT.PID.START.N" (boot id, pid, the writer's start time, a count
// within the process): unique, and a later process can tell a dead writer's leftover from a live
// writer's file without trusting a bare pid, which the kernel reuses.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

namespace gpurun::common {

// kFsync: the file and then its folder are fsynced, so the new content survives a crash of the
// machine (checkpoints, the queue's job files); kNoSync: it survives a crash of the process only.
enum class Durability { kNoSync, kFsync };

// Writes `content` to `path` through a temp file in the same folder (created with O_EXCL and
// O_NOFOLLOW, `mode` less the umask) renamed over `path`. A reader sees the old file or the new
// one, never a part. On failure the temp file is gone, `path` is untouched, and the Error
// (error.h; a std::runtime_error) names `path` and what failed.
void write_file_atomic(const std::string& path, std::string_view content, mode_t mode,
                       Durability durability);

// Removes the temp files of `path` (see above) whose writers are certainly dead: of this boot,
// with no process of that pid or one that started at another time. Files of another boot or of a
// name it cannot parse are left alone. Returns how many it removed.
int remove_dead_temp_files(const std::string& path);

}  // namespace gpurun::common
