#include "core/base/file_write.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace shardscope {

namespace fs = std::filesystem;

namespace {

Status Failed(const std::string& path, const std::string& what) {
  return Error("cannot write '" + path + "'" + (what.empty() ? std::string() : ": " + what));
}

}  // namespace

Status WriteFileAtomically(const std::string& path, const std::function<Status(std::ostream&)>& write) {
  if (path.empty()) return Error("no file name to write");
  std::error_code ec;
  fs::path target(path);
  // A link: the file it names is replaced, the link stays.
  if (fs::is_symlink(fs::symlink_status(target, ec))) {
    const fs::path resolved = fs::weakly_canonical(target, ec);
    if (!ec) target = resolved;
  }
  const fs::file_status st = fs::status(target, ec);
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    if (fs::is_directory(st)) return Failed(path, "it is a folder");
    // A device, FIFO or socket: written in place, never replaced.
    std::ofstream f(target, std::ios::binary);
    if (!f) return Failed(path, std::strerror(errno));
    if (Status s = write(f); !s.ok()) return s;
    f.flush();
    if (!f) return Failed(path, "the write failed");
    return Status::Ok();
  }
  const fs::path tmp = target.string() + ".part." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return Failed(path, std::strerror(errno));
    Status s = write(f);
    if (s.ok()) {
      f.flush();
      if (!f) s = Failed(path, "the write failed (disk full?)");
    }
    if (!s.ok()) {
      f.close();
      fs::remove(tmp, ec);
      return s;
    }
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    return Error("cannot replace '" + path + "': " + why);
  }
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  return WriteFileAtomically(path, [&](std::ostream& os) {
    os.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    return Status::Ok();
  });
}

}  // namespace shardscope
