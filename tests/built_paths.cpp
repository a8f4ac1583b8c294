#include "tests/built_paths.h"

namespace shardscope_test_paths {
const char* Cli() { return SHARDSCOPE_BUILT_CLI; }
const char* Gui() { return SHARDSCOPE_BUILT_GUI; }
const char* Shared() { return SHARDSCOPE_BUILT_SHARED_DIR; }
const char* Source() { return SHARDSCOPE_BUILT_SOURCE_DIR; }
}  // namespace shardscope_test_paths
