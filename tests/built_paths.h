// Where a test finds the built binaries, the source tree and ../shared. The paths are compiled into
// one small file (built_paths.cpp, the only test file with them on its command line), so every
// other test file compiles to the same object wherever the checkout is, and ccache serves it to a
// clone at another path (CI's fresh root) from a build here.
#pragma once

namespace shardscope_test_paths {
const char* Cli();     // the shardscope-cli binary
const char* Gui();     // the shardscope binary
const char* Shared();  // ../shared beside the checkout (SHARDSCOPE_SHARED_DIR; may not exist)
const char* Source();  // the source tree
}  // namespace shardscope_test_paths

#define SHARDSCOPE_CLI_PATH (::shardscope_test_paths::Cli())
#define SHARDSCOPE_GUI_PATH (::shardscope_test_paths::Gui())
#define SHARDSCOPE_SHARED_DIR (::shardscope_test_paths::Shared())
#define SHARDSCOPE_SOURCE_DIR (::shardscope_test_paths::Source())
