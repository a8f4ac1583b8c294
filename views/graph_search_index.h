// What the graph view's search (Ctrl+F) looks through: every instruction of a ScopeTree by name and
// opcode, and by its sharding as HLO text and in named-axis notation. Plain data, built once per
// tree and set of shardings — on the layout worker for a large graph, as soon as the tree or the
// shardings change, so the first search does not pay for it (GraphView).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/base/cancellation.h"
#include "core/sharding/mesh.h"
#include "core/sharding/sharding.h"
#include "views/graph_structure.h"

namespace shardscope::views {

class GraphSearchIndex {
 public:
  // An instruction's sharding (nullptr: none), valid while the index is built.
  using ShardingOf = std::function<const HloSharding*(int64_t id)>;

  // The index of `tree` with the shardings `sharding_of` gives over `mesh`. The names part of
  // `previous` is reused when it indexes the same tree. nullptr when `cancel` is set meanwhile.
  static std::shared_ptr<const GraphSearchIndex> Build(std::shared_ptr<const ScopeTree> tree, const ShardingOf& sharding_of,
                                                       const DeviceMesh& mesh, const GraphSearchIndex* previous = nullptr,
                                                       const CancellationToken& cancel = {});

  // Positions (ScopeTree::instructions()) of the instructions whose name, opcode or sharding text
  // contains `needle` (lower case), in order.
  std::vector<int32_t> Find(const std::string& needle) const;
  const ScopeTree* tree() const { return tree_.get(); }

 private:
  // The lower-case "name\nopcode\n" text of the tree's instructions, with each one's start.
  struct Names {
    std::string text;
    std::vector<size_t> starts;
  };
  std::shared_ptr<const ScopeTree> tree_;
  std::shared_ptr<const Names> names_;
  std::vector<int32_t> sharding_of_;               // by position: index into sharding_texts_, -1: none
  std::vector<std::string> sharding_texts_;        // each distinct (sharding, rank): its lower-case texts
};

}  // namespace shardscope::views
