// What every fuzz target shares (docs/fuzzing.md):
//
// - The function each target defines, TestOneInput(bytes) below, called by libFuzzer's entry
//   point LLVMFuzzerTestOneInput (defined once, in fuzz_target.cpp, which also counts the input).
//   Every target is built two ways: with clang's libFuzzer (the `fuzz` preset) for fuzzing, and
//   with the small replay driver (driver_main.cpp) in every build, so that each target runs over
//   its corpus as a plain test of the normal suite.
// - Finding(): a broken property (round trip differs, partitioned program computes something
//   else, ...). It prints what differs and aborts, which libFuzzer records as a crash with the
//   input that caused it. Bad input that is rejected with an error is not a finding.
// - Reach(): counts how far inputs get (parsed, propagated, partitioned, verified, ...). The
//   replay driver prints the counts; under libFuzzer they are printed at exit when the environment
//   has SHARDSCOPE_FUZZ_STATS=1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/base/status.h"

namespace shardscope::fuzz {

// One input (any bytes). Defined by each target.
void TestOneInput(std::string_view bytes);

// Prints "FINDING: <what>" and `detail` to stderr, then aborts.
[[noreturn]] void Finding(std::string_view what, std::string_view detail = {});

// A finding unless the error's byte offset is -1 (none) or lies inside the `size` bytes of text.
void CheckErrorOffset(const Error& error, size_t size, std::string_view what);

// Adds one to the counter `stage` (a string literal: counters are kept in first-use order).
void Reach(const char* stage);
// "stage: count (P% of inputs)" lines, in first-use order; "inputs" is counted by the entry point.
std::string ReachReport();

}  // namespace shardscope::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
