// The session hands freed heap back to the system when a module has replaced another
// (app/gui/release_memory.h). With jemalloc as the allocator (the release executables) the freed
// pages must leave the resident set when it is asked, not on jemalloc's 10 s decay curve: glibc's
// malloc_trim, which it used to call, does not reach jemalloc's pages (64 KiB blocks freed: 100 of
// 256 MB stayed resident with malloc_trim, 5 MB with the purge).
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include <QtTest>

#include "app/gui/release_memory.h"

extern "C" int mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen) __attribute__((weak));

namespace {

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

class TestGuiReleaseMemory : public QObject {
  Q_OBJECT

 private slots:
  void freedPagesLeaveTheResidentSet() {
    if (!mallctl) QSKIP("jemalloc is not this build's allocator (a sanitizer build): its purge is not there to check");
    constexpr int64_t kBlock = 64 << 10, kTotal = 256 << 20;
    const int64_t before = ResidentBytes();
    {
      std::vector<std::unique_ptr<char[]>> blocks;
      for (int64_t b = 0; b < kTotal; b += kBlock) {
        blocks.emplace_back(new char[kBlock]);
        std::memset(blocks.back().get(), 1, kBlock);  // touched: resident
      }
      QVERIFY2(ResidentBytes() - before >= kTotal * 9 / 10, "the blocks are not resident");
    }
    shardscope::gui::ReleaseFreedMemory();
    const int64_t kept = ResidentBytes() - before;
    QVERIFY2(kept <= kTotal / 8,
             qPrintable(QString("%1 MB of the 256 MB freed stayed resident").arg(static_cast<double>(kept) / (1 << 20), 0, 'f', 1)));
  }
};

QTEST_MAIN(TestGuiReleaseMemory)
#include "test_gui_release_memory.moc"
