#include "support/output_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace loom {

namespace {

Error SystemError(const std::string& what, const std::string& path) {
  return Error{fmt::format("cannot {} {}: {}", what, path, std::strerror(errno))};
}

// Writes all of `contents` to `fd`, retrying short writes and interrupts.
bool WriteAll(int fd, std::string_view contents) {
  while (!contents.empty()) {
    const ssize_t written = ::write(fd, contents.data(), contents.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    contents.remove_prefix(static_cast<size_t>(written));
  }
  return true;
}

Status WriteInPlace(const std::string& path, std::string_view contents) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return SystemError("open", path);
  bool ok = WriteAll(fd, contents);
  int saved = ok ? 0 : errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    saved = errno;
  }
  errno = saved;
  return ok ? OkStatus() : Status(SystemError("write", path));
}

// A temporary beside `path` that no other writer (thread or process) uses.
std::string TemporaryName(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return fmt::format("{}.tmp.{}.{}", path, ::getpid(), counter.fetch_add(1));
}

Status ReplaceAtomically(const std::string& path, std::string_view contents,
                         const struct stat* existing) {
  std::string temporary;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    temporary = TemporaryName(path);
    fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) return SystemError("write", path);
  }
  if (fd < 0) return SystemError("write", path);
  bool ok = (existing == nullptr || ::fchmod(fd, existing->st_mode & 07777) == 0) &&
            WriteAll(fd, contents);
  int saved = ok ? 0 : errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    saved = errno;
  }
  if (ok && ::rename(temporary.c_str(), path.c_str()) != 0) {
    ok = false;
    saved = errno;
  }
  if (!ok) {
    ::unlink(temporary.c_str());
    errno = saved;
    return SystemError("write", path);
  }
  return OkStatus();
}

}  // namespace

Status WriteOutputFile(const std::string& path, std::string_view contents) {
  if (path == "-") {
    if (std::fwrite(contents.data(), 1, contents.size(), stdout) != contents.size() ||
        std::fflush(stdout) != 0) {
      return Error{"cannot write to standard output"};
    }
    return OkStatus();
  }
  if (path.empty()) return Error{"cannot write: empty output path"};
  std::string target = path;
  struct stat info {};
  if (::lstat(path.c_str(), &info) == 0 && S_ISLNK(info.st_mode)) {
    // Replace what the link points at; a dangling link is written through.
    std::error_code error;
    const std::filesystem::path resolved = std::filesystem::canonical(path, error);
    if (error) return WriteInPlace(path, contents);
    target = resolved.string();
  }
  if (::stat(target.c_str(), &info) != 0) {
    if (errno != ENOENT) return SystemError("write", path);
    return ReplaceAtomically(target, contents, nullptr);
  }
  if (S_ISDIR(info.st_mode)) return Error{fmt::format("cannot write {}: it is a directory", path)};
  if (!S_ISREG(info.st_mode)) return WriteInPlace(target, contents);
  return ReplaceAtomically(target, contents, &info);
}

}  // namespace loom
