// Handing freed memory back to the system. A large module leaves hundreds of MB of freed heap
// behind when it goes (its instructions, the propagation session's copy of it, the shardings, the
// partitioned program), much of it in the malloc arenas of the worker threads that built it; the
// allocator keeps those pages, so a second large module would stack on the first in the process's
// resident set. The session asks for them back when a module has replaced another and once its
// first propagation has replaced the old module's propagation state.
#pragma once

namespace shardscope::gui {

// Returns the free pages of every malloc arena to the system: jemalloc's purge of all arenas when
// the executable links jemalloc, else glibc's malloc_trim; a no-op elsewhere. Takes a few
// milliseconds on a heap of a few GB.
void ReleaseFreedMemory();

}  // namespace shardscope::gui
