// core/base/file_write.h: a file is written whole or not at all, and what is not a regular file (a
// device such as /dev/null, a FIFO) is written in place, never replaced by a regular file. Until
// 2026-12-01 `shardscope-cli partition ... -o /dev/null`, run as root, renamed its output over
// /dev/null, and every later `> /dev/null` wrote to a regular file (apt then failed for `_apt`).
#include <QtTest/QtTest>

#include <sys/stat.h>
#include <sys/types.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/cli_test_support.h"
#include "core/base/file_write.h"

using namespace shardscope;
namespace fs = std::filesystem;

namespace {

std::string Read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t Entries(const fs::path& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

// A FIFO opened for reading before anything writes it (without blocking), so that a writer does not
// wait for a reader; what was written (up to the pipe's buffer) is read after the write returned.
// When the writer replaced the FIFO instead, nothing arrives and the test fails without hanging.
class FifoReader {
 public:
  explicit FifoReader(const fs::path& p) : fd_(::open(p.c_str(), O_RDONLY | O_NONBLOCK)) {}
  ~FifoReader() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  std::string Drain() {
    std::string text;
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
    }
    return text;
  }

 private:
  int fd_;
};

}  // namespace

class TestFileWrite : public QObject {
  Q_OBJECT
 private slots:
  void regularFileIsReplacedWhole() {
    QTemporaryDir dir;
    const fs::path p = fs::path(dir.path().toStdString()) / "out.txt";
    QVERIFY(WriteFileAtomically(p.string(), "first").ok());
    QCOMPARE(Read(p), std::string("first"));
    QVERIFY(WriteFileAtomically(p.string(), "second, longer").ok());
    QCOMPARE(Read(p), std::string("second, longer"));
    // A writer that fails leaves the old file as it was, and no temporary file behind.
    Status failed = WriteFileAtomically(p.string(), [](std::ostream& os) {
      os << "half";
      return Status(Error("the writer gave up"));
    });
    QVERIFY(!failed.ok());
    QCOMPARE(failed.error().message, std::string("the writer gave up"));
    QCOMPARE(Read(p), std::string("second, longer"));
    QCOMPARE(Entries(p.parent_path()), size_t{1});
    // A folder is no file; a missing folder says so.
    Status folder = WriteFileAtomically(dir.path().toStdString(), "x");
    QVERIFY(!folder.ok() && folder.error().message.find("it is a folder") != std::string::npos);
    QVERIFY(!WriteFileAtomically((p.parent_path() / "no" / "such.txt").string(), "x").ok());
    QVERIFY(!WriteFileAtomically("", "x").ok());
  }

  void fifoIsWrittenInPlace() {
    QTemporaryDir dir;
    const fs::path p = fs::path(dir.path().toStdString()) / "pipe";
    QCOMPARE(::mkfifo(p.c_str(), 0600), 0);
    FifoReader reader(p);
    QVERIFY(reader.ok());
    QVERIFY(WriteFileAtomically(p.string(), "through the pipe").ok());
    QCOMPARE(reader.Drain(), std::string("through the pipe"));
    QVERIFY(fs::is_fifo(fs::symlink_status(p)));
    QCOMPARE(Entries(p.parent_path()), size_t{1});
  }

  void symlinkKeepsItsLink() {
    QTemporaryDir dir;
    const fs::path target = fs::path(dir.path().toStdString()) / "target.txt";
    const fs::path link = fs::path(dir.path().toStdString()) / "link.txt";
    QVERIFY(WriteFileAtomically(target.string(), "old").ok());
    fs::create_symlink(target, link);
    QVERIFY(WriteFileAtomically(link.string(), "new").ok());
    QVERIFY(fs::is_symlink(fs::symlink_status(link)));
    QCOMPARE(Read(target), std::string("new"));
    QCOMPARE(Entries(target.parent_path()), size_t{2});
  }

  // The CLI's -o goes through it: a FIFO given as the output stays a FIFO (as /dev/null does).
  void cliOutputToAFifo() {
    QTemporaryDir dir;
    const fs::path p = fs::path(dir.path().toStdString()) / "module.pipe";
    QCOMPARE(::mkfifo(p.c_str(), 0600), 0);
    FifoReader reader(p);
    QVERIFY(reader.ok());
    const testing::CliResult r = testing::RunCli({"zoo", "build", "mlp", "-o", QString::fromStdString(p.string())});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    const std::string text = reader.Drain();
    QVERIFY2(text.find("HloModule") == 0, text.substr(0, 80).c_str());
    QVERIFY(fs::is_fifo(fs::symlink_status(p)));
  }
};

QTEST_GUILESS_MAIN(TestFileWrite)
#include "test_file_write.moc"
