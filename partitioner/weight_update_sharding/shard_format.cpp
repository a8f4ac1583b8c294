#include "partitioner/weight_update_sharding/shard_format.h"

#include <algorithm>

namespace shardscope::wus {

std::string DimsText(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

// ---- schemes ------------------------------------------------------------------------------------

ShardingScheme OnePhaseScheme(int64_t devices) {
  ShardingScheme s;
  s.kind = ShardingScheme::Kind::kOnePhase;
  s.rows = 1;
  s.cols = devices;
  s.shards = devices;
  std::vector<int64_t> all;
  for (int64_t d = 0; d < devices; ++d) {
    all.push_back(d);
    s.shard_index.push_back(d);
  }
  s.phases = {{all}};
  s.shard_groups = {all};
  return s;
}

ShardingScheme TwoPhaseScheme(int64_t rows, int64_t cols) {
  ShardingScheme s;
  s.kind = ShardingScheme::Kind::kTwoPhase;
  s.rows = rows;
  s.cols = cols;
  s.shards = rows * cols;
  Groups row_groups(static_cast<size_t>(rows)), col_groups(static_cast<size_t>(cols));
  s.shard_index.resize(static_cast<size_t>(rows * cols));
  std::vector<int64_t> all;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t d = r * cols + c;
      row_groups[static_cast<size_t>(r)].push_back(d);
      col_groups[static_cast<size_t>(c)].push_back(d);
      s.shard_index[static_cast<size_t>(d)] = c * rows + r;
      all.push_back(d);
    }
  s.phases = {row_groups, col_groups};
  s.shard_groups = {all};
  return s;
}

ShardingScheme PartialScheme(int64_t rows, int64_t cols) {
  ShardingScheme s;
  s.kind = ShardingScheme::Kind::kPartial;
  s.rows = rows;
  s.cols = cols;
  s.shards = cols;
  Groups row_groups(static_cast<size_t>(rows)), col_groups(static_cast<size_t>(cols));
  s.shard_index.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t d = r * cols + c;
      row_groups[static_cast<size_t>(r)].push_back(d);
      col_groups[static_cast<size_t>(c)].push_back(d);
      s.shard_index[static_cast<size_t>(d)] = c;
    }
  s.phases = {row_groups};
  s.cross_groups = col_groups;
  s.shard_groups = row_groups;
  return s;
}

std::string ShardingScheme::Describe() const {
  switch (kind) {
    case Kind::kOnePhase: return "one phase over " + std::to_string(shards) + " replicas";
    case Kind::kTwoPhase:
      return "two phases on the " + std::to_string(rows) + "x" + std::to_string(cols) + " replica mesh (rows, then columns)";
    case Kind::kPartial:
      return "partial: within each of the " + std::to_string(rows) + " rows of " + std::to_string(cols) +
             " replicas, all-reduced across rows";
  }
  return "";
}

// ---- formats -----------------------------------------------------------------------------------

std::vector<int64_t> ShardFormat::FormattedDims() const {
  if (bitcast) return {rows, tile_rows, tile_cols};
  std::vector<int64_t> d = {rows};
  for (size_t i = static_cast<size_t>(merge); i < dims.size(); ++i) d.push_back(dims[i]);
  return d;
}

std::vector<int64_t> ShardFormat::PaddedDims() const {
  std::vector<int64_t> d = FormattedDims();
  d[0] = padded;
  return d;
}

std::vector<int64_t> ShardFormat::ShardDims() const {
  std::vector<int64_t> d = FormattedDims();
  d[0] = shard_rows();
  return d;
}

ShardFormat ShardFormat::Derived(const std::vector<int64_t>& new_dims) const {
  ShardFormat f = *this;
  f.dims = new_dims;
  return f;
}

bool ShardFormat::operator==(const ShardFormat& o) const {
  return dims == o.dims && merge == o.merge && bitcast == o.bitcast && tile_rows == o.tile_rows &&
         tile_cols == o.tile_cols && rows == o.rows && padded == o.padded && shards == o.shards;
}

std::string ShardFormat::Describe() const {
  std::string s = DimsText(dims);
  if (bitcast) {
    s += " -> bitcast " + DimsText(FormattedDims());
  } else if (merge > 1) {
    s += " -> merge " + DimsText(FormattedDims());
  }
  if (padding()) s += " -> pad " + DimsText(PaddedDims());
  return s + " -> " + std::to_string(shards) + " x " + DimsText(ShardDims());
}

namespace {

int64_t Product(const std::vector<int64_t>& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= d[i];
  return p;
}

// Merging dims [0, k) is allowed when no reduce keeps some of them and collapses others.
bool MergeAllowed(int64_t k, const std::vector<ReduceConstraint>& constraints) {
  for (const auto& c : constraints) {
    int64_t in = 0;
    for (int64_t d : c.dims)
      if (d < k) ++in;
    if (in != 0 && in != k) return false;
  }
  return true;
}

bool BitcastAllowed(size_t rank, const std::vector<ReduceConstraint>& constraints) {
  for (const auto& c : constraints)
    if (c.dims.size() != rank) return false;
  return true;
}

}  // namespace

std::optional<ShardFormat> ChooseShardFormat(const std::vector<int64_t>& dims, int64_t shards,
                                             const std::vector<ReduceConstraint>& constraints, int64_t tile_rows,
                                             int64_t tile_cols) {
  const size_t rank = dims.size();
  if (rank == 0 || shards < 1) return std::nullopt;
  for (int64_t d : dims)
    if (d < 1) return std::nullopt;
  ShardFormat base;
  base.dims = dims;
  base.shards = shards;
  // Merge candidates: dims above the tiled minor two (at least dim 0 alone).
  const int64_t max_merge = std::max<int64_t>(1, static_cast<int64_t>(rank) - 2);
  auto merged = [&](int64_t k) {
    ShardFormat f = base;
    f.merge = k;
    f.rows = Product(dims, 0, static_cast<size_t>(k));
    f.padded = (f.rows + shards - 1) / shards * shards;
    return f;
  };
  // 1. An even merge, the fewest dims merged.
  for (int64_t k = 1; k <= max_merge; ++k)
    if (MergeAllowed(k, constraints) && merged(k).rows % shards == 0) return merged(k);
  // 2. An even tiled bitcast.
  if (tile_rows > 0 && tile_cols > 0 && rank >= 2 && dims[rank - 2] % tile_rows == 0 && dims[rank - 1] % tile_cols == 0 &&
      BitcastAllowed(rank, constraints)) {
    const int64_t tiles = Product(dims, 0, rank) / (tile_rows * tile_cols);
    if (tiles % shards == 0) {
      ShardFormat f = base;
      f.bitcast = true;
      f.merge = static_cast<int64_t>(rank);
      f.tile_rows = tile_rows;
      f.tile_cols = tile_cols;
      f.rows = f.padded = tiles;
      return f;
    }
  }
  // 3. The merge with the least padding (relative to the merged extent).
  std::optional<ShardFormat> best;
  double best_waste = 0;
  for (int64_t k = 1; k <= max_merge; ++k) {
    if (!MergeAllowed(k, constraints)) continue;
    ShardFormat f = merged(k);
    const double waste = static_cast<double>(f.padded - f.rows) / static_cast<double>(f.rows);
    if (!best || waste < best_waste) {
      best = f;
      best_waste = waste;
    }
  }
  return best;
}

}  // namespace shardscope::wus
