// Graph layout as plain data. Graphviz is not thread-safe, so every layout runs as a job on the
// job tracker's layout lane (one worker thread), under a mutex, on a snapshot (LayoutInput) and
// hands back plain structs (LayoutResult); the graph view creates its items from them on the GUI
// thread. A newer layout of the same view supersedes an older one (cancelled between two groups).
// Group layouts are cached, so a group is laid out once per set of items and sizes; annotation
// edits never lay out again.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <QMutex>

namespace shardscope::views {

// Sizes and coordinates are scene units (1 unit = 1 Graphviz point).
struct LayoutInputNode {
  std::string key;
  double width = 120, height = 48;
  std::string cluster;  // key of the cluster holding it, "" for top level
};
struct LayoutInputEdge {
  std::string tail, head;
};
struct LayoutInputCluster {
  std::string key;
  std::string parent;  // "" for top level
  std::string label;
};
struct LayoutInput {
  std::vector<LayoutInputNode> nodes;
  std::vector<LayoutInputEdge> edges;
  std::vector<LayoutInputCluster> clusters;
};

struct LayoutBox {
  double x = 0, y = 0, w = 0, h = 0;  // top-left corner, y grows downwards
};
struct LayoutEdgePath {
  std::string tail, head;
  // Cubic Bezier: start point followed by (control, control, end) triples.
  std::vector<std::pair<double, double>> points;
  bool has_arrow = false;
  std::pair<double, double> arrow_tip{0, 0};  // the arrowhead ends here
};
struct LayoutResult {
  bool ok = false;
  std::string error;
  std::string engine;  // "dot" or "layered (fallback)"
  double width = 0, height = 0;
  std::unordered_map<std::string, LayoutBox> nodes;
  std::unordered_map<std::string, LayoutBox> clusters;
  std::vector<LayoutEdgePath> edges;
  double millis = 0;
};

// Runs Graphviz dot (takes the global Graphviz mutex; call from the layout worker only).
LayoutResult LayoutWithGraphviz(const LayoutInput& input);
// A simple layered layout used when Graphviz fails (no plugins found, ...).
LayoutResult LayoutLayered(const LayoutInput& input);

// Finished group layouts, shared by every graph view of the process and keyed by what was laid out
// (graph, group, the items it shows with their sizes: graph_hierarchy.h), so a group expanded
// again, or shown by a second view of the same graph, is not laid out again. Thread-safe.
class LayoutCache {
 public:
  static LayoutCache& instance();

  // The cached layout for `key`, or nullptr.
  std::shared_ptr<const LayoutResult> cached(const std::string& key) const;
  // The layout of `input`: the cached one (*from_cache = true), else Graphviz dot (the layered
  // layout when dot fails), cached. Call it on the job tracker's layout lane only: Graphviz is not
  // thread-safe.
  std::shared_ptr<const LayoutResult> layOut(const std::string& key, const LayoutInput& input, bool* from_cache = nullptr);
  int layoutsRun() const;  // how many group layouts actually ran (not served from the cache)
  void clearCache();

 private:
  LayoutCache() = default;
  mutable QMutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const LayoutResult>> cache_;
  std::vector<std::string> order_;  // insertion order, for eviction
  size_t order_start_ = 0;
  int runs_ = 0;
};

}  // namespace shardscope::views
