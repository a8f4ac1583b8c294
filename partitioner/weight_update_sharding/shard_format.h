// How weight-update sharding splits one value between the replicas: the sharding scheme (which
// devices hold which shard and through which collectives, paper section 5) and the shard format
// (the data formatting before the split, section 4.1).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardscope::wus {

using Groups = std::vector<std::vector<int64_t>>;

// Which devices share a value and how. Devices are the program's global device ids; the replicas
// form a rows x cols mesh (device = row * cols + col), a ring when rows = 1.
//   kOnePhase  one reduce-scatter / all-gather over every device; shard i on the device at
//              position i of the group (the ring order).
//   kTwoPhase  section 5.1: reduce-scatter within each row (cols shards of D/cols), then within each
//              column (D/(rows*cols)); the device at (r, c) holds shard c * rows + r. The all-gather
//              runs the phases in reverse.
//   kPartial   section 5.2: each row shards the value on its own (reduce-scatter within the row),
//              an all-reduce across the rows (within each column) completes the sum; the device at
//              (r, c) holds shard c, so every row holds the whole value. Used when full shards
//              would be too small (latency-bound).
struct ShardingScheme {
  enum class Kind { kOnePhase, kTwoPhase, kPartial };
  Kind kind = Kind::kOnePhase;
  int64_t rows = 1, cols = 1;
  int64_t shards = 1;                    // G: shards of a value (within a sharding group)
  std::vector<int64_t> shard_index;      // per device
  std::vector<Groups> phases;            // reduce-scatter phases, in order; members in shard order
  Groups cross_groups;                   // kPartial: the all-reduce across sharding groups
  Groups shard_groups;                   // devices that together hold one copy of the value
  std::string Describe() const;          // "one phase over 16 devices", ...
};
ShardingScheme OnePhaseScheme(int64_t devices);
ShardingScheme TwoPhaseScheme(int64_t rows, int64_t cols);
ShardingScheme PartialScheme(int64_t rows, int64_t cols);

// A value's shard format (section 4.1): dims [0, merge) merged into one (a reshape that moves no
// data: only dims above the platform's two tiled minor dims are merged), or the whole array
// bitcast into [T, tile_rows, tile_cols] (the tiled layout's own tiles: no data moves and no
// padding where T divides), then dim 0 padded to `padded` (a multiple of G) and split into G
// shards of padded / G rows. In the layout-free IR the bitcast reads the elements in row-major
// order: every input of an update is formatted the same way, which is all the sharding needs
// (the paper: bitcast is platform-specific but consistent on a platform).
struct ShardFormat {
  std::vector<int64_t> dims;  // the value's (full) dims
  int64_t merge = 1;
  bool bitcast = false;
  int64_t tile_rows = 0, tile_cols = 0;
  int64_t rows = 0;    // dim 0 after merging / bitcasting
  int64_t padded = 0;  // rows padded to a multiple of the shard count
  int64_t shards = 1;

  std::vector<int64_t> FormattedDims() const;  // [rows, rest...] or [T, tile_rows, tile_cols]
  std::vector<int64_t> PaddedDims() const;
  std::vector<int64_t> ShardDims() const;       // one device's piece
  int64_t shard_rows() const { return padded / shards; }
  bool padding() const { return padded != rows; }
  // The same format over other dims (a value derived by a reduce or broadcast that keeps dims
  // [0, merge)): merge, padding and shard count carried over.
  ShardFormat Derived(const std::vector<int64_t>& new_dims) const;
  bool operator==(const ShardFormat& o) const;
  // "[3,3,256,256] -> merge [9,256,256] -> pad [10,256,256] -> 10 x [1,256,256]"
  std::string Describe() const;
};

// A reduce some update applies to values of the sharded shape, over `dims`: the format may not
// merge a reduced dim with a kept one (section 4.1), and a bitcast only suits a reduce over all.
struct ReduceConstraint {
  std::vector<int64_t> dims;
};

// Chooses the format of a value of `dims` split `shards` ways (section 4.1), in order of
// preference: the fewest leading dims merged so that the merged extent divides evenly; a tiled
// bitcast that divides evenly (tile 0 x 0: never); else the merge (of the dims above the tiled
// minor two) with the least padding. Nullopt for a scalar or when no candidate satisfies the
// constraints. The paper's examples: [3,3,256,256] on 10 replicas gives [9,256,256] padded to
// [10,256,256]; on 64 replicas (tiles 8 x 128) the bitcast [576,8,128].
std::optional<ShardFormat> ChooseShardFormat(const std::vector<int64_t>& dims, int64_t shards,
                                             const std::vector<ReduceConstraint>& constraints, int64_t tile_rows,
                                             int64_t tile_cols);

std::string DimsText(const std::vector<int64_t>& dims);  // "[3,3,256,256]"

}  // namespace shardscope::wus
