#include "partitioner/spmd/all_to_all_pieces.h"

#include <algorithm>
#include <cctype>

namespace shardscope {
namespace {

// Tile `t` of `k` along an extent: its elements, "3" or "4–5" ("" when it is all padding).
std::string TileRange(int64_t extent, int64_t k, int64_t t) {
  const int64_t shard = (extent + k - 1) / std::max<int64_t>(1, k);
  const int64_t lo = t * shard, hi = std::min(extent, (t + 1) * shard);
  if (hi <= lo) return "";
  if (hi - lo == 1) return std::to_string(lo);
  return std::to_string(lo) + "\u2013" + std::to_string(hi - 1);
}

bool Several(const std::string& range) { return range.find("\u2013") != std::string::npos; }

std::string Word(char letter, bool plural) {
  switch (letter) {
    case 'E': return plural ? "experts" : "expert";
    case 'G': return plural ? "groups" : "group";
    default: return std::string(1, letter);
  }
}

}  // namespace

std::string DimensionLetters(const Instruction& inst) {
  auto v = FrontendAttribute(inst.frontend_attributes, kDimsAttribute);
  if (!v || static_cast<int64_t>(v->size()) != inst.shape().rank()) return "";
  for (char c : *v)
    if (!std::isalpha(static_cast<unsigned char>(c))) return "";
  return *v;
}

Result<AllToAllPieces> DescribeAllToAllPieces(const InsertedCollective& collective, const Module& original,
                                              const ShardingLookup& sharding_of, int64_t max_members) {
  if (collective.kind != Opcode::kAllToAll) return Error(collective.instruction + " is not an all-to-all");
  const std::string prefix = "reshard ";
  const size_t arrow = collective.reason.find(" -> ");
  if (collective.reason.rfind(prefix, 0) != 0 || arrow == std::string::npos) {
    return Error(collective.instruction + " does not reshard a tensor (" + collective.reason + ")");
  }
  auto before = HloSharding::Parse(collective.reason.substr(prefix.size(), arrow - prefix.size()));
  auto after = HloSharding::Parse(collective.reason.substr(arrow + 4));
  if (!before.ok() || !after.ok()) return Error("cannot read the shardings of \"" + collective.reason + "\"");
  const Instruction* origin = original.FindInstruction(collective.origin);
  if (!origin) return Error("no instruction " + collective.origin + " in the module");

  // The tensor moved: an operand resharded from `before`, or the result resharded to `after`.
  const Instruction* tensor = nullptr;
  auto has = [&](const Instruction* i, const HloSharding& s) {
    if (!i || i->shape().IsTuple() || i->shape().rank() != s.TiledDataRank()) return false;
    auto own = sharding_of(*i);
    return own && *own == s;
  };
  for (const Instruction* op : origin->operands())
    if (!tensor && has(op, *before)) tensor = op;
  if (!tensor && has(origin, *after)) tensor = origin;
  if (!tensor) return Error("cannot tell which tensor of " + collective.origin + " " + collective.instruction + " moves");

  AllToAllPieces p;
  p.tensor = tensor->name();
  p.letters = DimensionLetters(*tensor);
  const int64_t rank = tensor->shape().rank();
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t tb = before->DimensionTiles(d), ta = after->DimensionTiles(d);
    if (tb > 1 && ta == 1) p.from_dim = d;
    if (ta > 1 && tb == 1) p.to_dim = d;
  }
  if (p.from_dim < 0 || p.to_dim < 0) return Error(collective.instruction + " moves no sharding from one dim to another");
  const int64_t k = before->DimensionTiles(p.from_dim);
  if (after->DimensionTiles(p.to_dim) != k) return Error(collective.instruction + ": the two dims are split differently");
  p.members = k;
  if (k > max_members) {
    return Error(collective.instruction + ": " + std::to_string(k) + " members, too many to name each of their pieces");
  }

  const int64_t A = tensor->shape().dim(p.from_dim), B = tensor->shape().dim(p.to_dim);
  const char la = p.letters.empty() ? '?' : p.letters[static_cast<size_t>(p.from_dim)];
  const char lb = p.letters.empty() ? '?' : p.letters[static_cast<size_t>(p.to_dim)];
  if (la == 'G' && lb == 'E') p.role = "dispatch";
  if (la == 'E' && lb == 'G') p.role = "combine";
  auto dim_name = [&](int64_t d) {
    return p.letters.empty() ? "dim " + std::to_string(d) : std::string(1, p.letters[static_cast<size_t>(d)]);
  };

  p.pieces.assign(static_cast<size_t>(k), std::vector<std::string>(static_cast<size_t>(k)));
  for (int64_t i = 0; i < k; ++i) {
    const std::string ra = TileRange(A, k, i);
    for (int64_t j = 0; j < k; ++j) {
      const std::string rb = TileRange(B, k, j);
      std::string& s = p.pieces[static_cast<size_t>(i)][static_cast<size_t>(j)];
      if (ra.empty() || rb.empty()) s = "padding";
      else if (p.role == "dispatch") s = "tokens of " + Word('G', Several(ra)) + " " + ra + " for " + Word('E', Several(rb)) + " " + rb;
      else if (p.role == "combine") s = "outputs of " + Word('E', Several(ra)) + " " + ra + " for " + Word('G', Several(rb)) + " " + rb;
      else s = dim_name(p.from_dim) + " " + ra + ", " + dim_name(p.to_dim) + " " + rb;
    }
  }
  const std::string n = std::to_string(k);
  if (p.role == "dispatch") {
    p.summary = "MoE dispatch: " + p.tensor + " goes from split by group (G over " + n +
                " devices) to split by expert (E): every device sends each other device its groups' tokens for that device's experts.";
  } else if (p.role == "combine") {
    p.summary = "MoE combine: " + p.tensor + " goes from split by expert (E over " + n +
                " devices) back to split by group (G): every device returns its experts' outputs for each other device's groups.";
  } else {
    p.summary = p.tensor + " goes from split along " + dim_name(p.from_dim) + " to split along " + dim_name(p.to_dim) +
                " over " + n + " devices: member i sends member j its " + dim_name(p.from_dim) + " rows of tile j of " +
                dim_name(p.to_dim) + ".";
  }
  return p;
}

}  // namespace shardscope
