// The hierarchical layout of what is visible (graph_structure.h's VisibleTree). Every open group is
// laid out on its own, children before parents: Graphviz sees only the group's items — its
// instructions, collapsed groups and folded runs, and its open child groups as boxes the size of
// their own layout — so the cost is that of what is on screen, not of the module, and a group
// whose items and sizes did not change is served from the cache (GroupLayouter). The groups are
// then placed inside each other, and the data edges bundled: one edge per pair of visible nodes,
// with the number of edges it stands for, routed along the layout of the innermost group holding
// both ends (with a short connector from a node nested deeper to that group's boundary).
// Plain data; runs on the layout worker.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/base/cancellation.h"
#include "views/graph_layout.h"
#include "views/graph_structure.h"

namespace shardscope::views {

// An open group's frame: a header with its label above its items, and a margin round them.
constexpr double kClusterHeader = 26, kClusterPad = 10;

struct HierarchyInput {
  std::shared_ptr<const ScopeTree> tree;
  ViewState state;
  // Every visible node's size by key ("i<id>", "g<scope>", "f<run>"); "c<scope>" gives an open
  // group's smallest width (its label). Missing sizes are 120 x 48.
  std::unordered_map<std::string, std::pair<double, double>> sizes;
  // Identifies the module (and the fonts): the start of every group layout's cache key.
  std::string cache_prefix;
};

struct HierarchyCluster {
  int scope = 0;
  LayoutBox box;  // the frame, header included
};
struct HierarchyEdge {
  std::string tail, head;  // visible node keys
  int count = 1;           // data edges bundled into this one
  bool nested = false;     // an end sits inside an open group below the one routing it (a connector)
  std::vector<std::pair<double, double>> points;  // start, then (control, control, end) triples
  bool has_arrow = false;
  std::pair<double, double> arrow_tip{0, 0};
};
struct HierarchyLayout {
  bool ok = false;
  bool cancelled = false;
  std::string error;   // a group that Graphviz could not lay out (the fallback was used)
  std::string engine;  // "dot", or "layered (fallback)" when any group needed it
  double width = 0, height = 0;
  std::unordered_map<std::string, LayoutBox> nodes;  // visible nodes, absolute
  std::vector<HierarchyCluster> clusters;           // open groups but the root, parents first
  std::vector<HierarchyEdge> edges;
  int groups = 0;         // open groups laid out or taken from the cache
  int groups_cached = 0;  // of which from the cache
  double millis = 0;
};

// Lays out one group's items: returns the layout for `key` (from a cache, or by running it).
using GroupLayouter = std::function<std::shared_ptr<const LayoutResult>(const std::string& key, const LayoutInput& input,
                                                                        bool* from_cache)>;

// Stops early (cancelled = true) when `cancel` is set between two groups.
HierarchyLayout LayOutHierarchy(const HierarchyInput& input, const GroupLayouter& layouter,
                                const CancellationToken& cancel);

}  // namespace shardscope::views
