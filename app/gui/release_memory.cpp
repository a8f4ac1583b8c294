#include "app/gui/release_memory.h"

#include <cstddef>
#include <cstdlib>  // defines __GLIBC__ on glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

// jemalloc's control interface, when the executable links jemalloc (CMakeLists.txt,
// SHARDSCOPE_JEMALLOC): weak, so the GUI still links and runs on glibc's malloc alone.
extern "C" int mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen) __attribute__((weak));

namespace shardscope::gui {

void ReleaseFreedMemory() {
  if (mallctl) {
    // Every arena's unused dirty pages back to the system now, instead of on jemalloc's decay
    // curve (4096 is MALLCTL_ARENAS_ALL in jemalloc 5). glibc's malloc_trim would not reach them.
    mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);
    return;
  }
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace shardscope::gui
