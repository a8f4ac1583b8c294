#include "views/graph_search_index.h"

#include <algorithm>
#include <cctype>
#include <unordered_map>

#include <QString>

#include "views/sharding_style.h"

namespace shardscope::views {

std::shared_ptr<const GraphSearchIndex> GraphSearchIndex::Build(std::shared_ptr<const ScopeTree> tree,
                                                                const ShardingOf& sharding_of, const DeviceMesh& mesh,
                                                                const GraphSearchIndex* previous,
                                                                const CancellationToken& cancel) {
  auto index = std::make_shared<GraphSearchIndex>();
  const auto& order = tree->instructions();
  // Names and opcodes: one lower-case text for the whole tree, searched with find (a 100k-instruction
  // module: a few MB, instead of 200k case-folding searches).
  if (previous && previous->tree_ == tree) {
    index->names_ = previous->names_;
  } else {
    auto names = std::make_shared<Names>();
    names->starts.reserve(order.size());
    for (const Instruction* inst : order) {
      names->starts.push_back(names->text.size());
      for (const std::string* part : {&inst->name(), &inst->opcode_text()}) {
        for (char ch : *part) names->text.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(ch))));
        names->text.push_back('\n');
      }
    }
    index->names_ = std::move(names);
  }
  // Shardings are few and shared by many tensors: each distinct one (per sharding and rank: the
  // named-axis form depends on both) gets its lower-case texts once.
  index->sharding_of_.assign(order.size(), -1);
  struct Seen {
    const HloSharding* sharding;
    int64_t rank;
    int32_t index;
  };
  std::unordered_map<uint64_t, std::vector<Seen>> seen;
  for (size_t position = 0; position < order.size(); ++position) {
    if (position % 4096 == 0 && cancel.cancelled()) return nullptr;
    const Instruction* inst = order[position];
    const HloSharding* sh = sharding_of(inst->id());
    if (!sh) continue;
    const int64_t rank = inst->shape().IsArray() ? inst->shape().rank() : -1;
    uint64_t h = static_cast<uint64_t>(rank + 2) * 1000003ULL;
    auto mix = [&h](uint64_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
    mix(sh->IsTiled() * 4 + sh->IsReplicated() * 2 + sh->IsTuple());
    for (int64_t d : sh->tile_assignment().dims()) mix(static_cast<uint64_t>(d));
    const auto& devices = sh->tile_assignment().devices();
    for (size_t k = 0; k < devices.size() && k < 8; ++k) mix(static_cast<uint64_t>(devices[k]));
    mix(sh->subgroup_types().size());
    mix(sh->tuple_elements().size());
    auto& bucket = seen[h];
    auto it = std::find_if(bucket.begin(), bucket.end(),
                           [&](const Seen& s) { return s.rank == rank && (s.sharding == sh || *s.sharding == *sh); });
    if (it == bucket.end()) {
      const QString texts = HloShardingText(*sh) + "\n" + NamedAxesText(*sh, inst->shape(), mesh, "");
      index->sharding_texts_.push_back(texts.toLower().toStdString());
      bucket.push_back({sh, rank, static_cast<int32_t>(index->sharding_texts_.size()) - 1});
      it = bucket.end() - 1;
    }
    index->sharding_of_[position] = it->index;
  }
  index->tree_ = std::move(tree);
  return index;
}

std::vector<int32_t> GraphSearchIndex::Find(const std::string& needle) const {
  std::vector<int32_t> found;
  if (needle.empty()) return found;
  const auto& order = tree_->instructions();
  const std::string& text = names_->text;
  const auto& starts = names_->starts;
  // Names and opcodes: one find pass over the tree's lower-case text.
  std::vector<char> hit(order.size(), 0);
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    const auto it = std::upper_bound(starts.begin(), starts.end(), at);
    hit[static_cast<size_t>(it - starts.begin()) - 1] = 1;
  }
  // Shardings: each distinct one's texts searched once.
  std::vector<char> sharding_hit(sharding_texts_.size(), 0);
  for (size_t k = 0; k < sharding_texts_.size(); ++k) sharding_hit[k] = sharding_texts_[k].find(needle) != std::string::npos;
  for (size_t position = 0; position < order.size(); ++position) {
    const int32_t k = sharding_of_[position];
    if (hit[position] || (k >= 0 && sharding_hit[static_cast<size_t>(k)])) found.push_back(static_cast<int32_t>(position));
  }
  return found;
}

}  // namespace shardscope::views
