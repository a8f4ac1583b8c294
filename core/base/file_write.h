// Writing a file whole or not at all: the one helper the CLI's outputs and the simulator's exports
// (traces, CSVs) share.
//
// A regular file (or a path that does not exist yet) is written to a temporary file beside it that
// then replaces it: a failed or interrupted write leaves the old file as it was. A path that names
// something else — a device such as /dev/null, a FIFO, a socket — is written to directly: renaming
// over it would replace the device with a regular file (as root, `-o /dev/null` used to). A
// symbolic link is followed: its target is replaced, the link kept.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <string_view>

#include "core/base/status.h"

namespace shardscope {

// `write` fills the stream; its error (or a failed write) leaves `path` untouched when it is a
// regular file. Errors name the path.
Status WriteFileAtomically(const std::string& path, const std::function<Status(std::ostream&)>& write);
Status WriteFileAtomically(const std::string& path, std::string_view contents);

}  // namespace shardscope
