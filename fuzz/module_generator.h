// A structure-aware input for the pipeline target: the fuzzer's bytes are read as a sequence of
// choices that build a valid module (shapes agree, every op has a partitioner handler), annotate
// some of its values with random shardings over a random device mesh, and pick the root. Every
// byte string gives a module (missing bytes read as 0, which gives the smallest choices), so
// almost every input reaches propagation, partitioning and numerical verification.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/base/status.h"
#include "core/ir/ir.h"
#include "core/sharding/mesh.h"

namespace shardscope::fuzz {

// Choices read from bytes; each call consumes what it needs, 0 once the bytes are used up.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  // A number in [0, bound) (bound >= 1).
  uint64_t Below(uint64_t bound);
  bool Chance(uint64_t one_in) { return Below(one_in) == 0; }
  bool exhausted() const { return pos_ >= size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

struct GeneratorLimits {
  int64_t max_devices = 8;          // mesh size
  int64_t max_elements = 4096;      // per array
  int64_t max_ops = 12;             // instructions after the parameters
};

struct GeneratedModule {
  std::unique_ptr<Module> module;  // verified; num_partitions = the mesh's devices
  DeviceMesh mesh;
};

// An error only when the generator itself built something the builder rejects (a bug in the
// generator, reported as such by the target).
Result<GeneratedModule> GenerateModule(ByteReader& in, const GeneratorLimits& limits = {});

}  // namespace shardscope::fuzz
