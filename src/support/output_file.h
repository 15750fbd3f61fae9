// Writing a command's output to a path the user named.
//
// A regular file (or a path that does not exist yet) is replaced
// atomically: the text goes to a temporary beside it (a name no other
// process uses) that is renamed over the path, so a reader never sees half
// a file and a failed write leaves the old one; an existing file keeps its
// permission bits. Anything else is written in place and never replaced: a
// device (`-o /dev/null`), a pipe or a socket, and a symbolic link (the file
// it points at is replaced, the link stays). `-` is standard output. A
// directory is an error.
#pragma once

#include <string>
#include <string_view>

#include "support/status.h"

namespace loom {

Status WriteOutputFile(const std::string& path, std::string_view contents);

}  // namespace loom
