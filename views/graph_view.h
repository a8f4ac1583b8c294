// The computation graph, drawn as QGraphicsItems. Each tensor is coloured by its sharding; user
// annotations have a thick border; hovering shows the named-axis notation and the per-device shape.
// Graphs of any size open with their top groups (name scopes, called computations, chunks:
// graph_structure.h) collapsed and repeated groups folded ("layer × 64"); double-click a group to
// expand it, a frame's header to collapse it. Only what is visible is laid out, group by group
// (graph_hierarchy.h), as a job on the tracker's layout lane, each group's layout cached; a layout
// still running when the view changes again is cancelled, never waited for. Selecting, finding or
// following a link to a hidden instruction expands the groups holding it and centres it.
// Annotation edits recolour the existing items and never lay out again.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <QGraphicsItem>
#include <QGraphicsView>
#include <QPointer>
#include <QWidget>

#include "core/sharding/sharding.h"
#include "views/graph_hierarchy.h"
#include "views/graph_layout.h"
#include "views/graph_search_index.h"
#include "views/graph_structure.h"

class QBoxLayout;
class QComboBox;
class QLayout;
class QLabel;
class QLineEdit;
class QToolButton;

namespace shardscope::views {

class DocumentModel;
class GraphView;
class JobTracker;

// One node: an instruction, a collapsed group, or a folded run of repeated groups.
class GraphNodeItem : public QGraphicsItem {
 public:
  GraphNodeItem(GraphView* view, std::string key, int64_t instruction_id, int scope, const QRectF& rect, int run = -1);

  QRectF boundingRect() const override;
  QPainterPath shape() const override;
  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget* widget) override;

  const std::string& key() const { return key_; }
  int64_t instructionId() const { return id_; }  // -1 for a group or a run
  int scope() const { return scope_; }           // group's scope, -1 otherwise
  int run() const { return run_; }               // folded run, -1 otherwise
  bool isGroup() const { return id_ < 0; }       // a group or a folded run
  QRectF rect() const { return rect_; }

  // Appearance, set by GraphView::recolour().
  struct Look {
    QStringList lines;     // opcode, name, shape (or the group's title lines)
    QString sharding_line; // named-axis notation (elided when drawn)
    QColor fill;
    bool user = false;     // user annotation: thick border
    bool sharded = false;  // false: dashed border
    int repeat = 0;        // a folded run: how many groups it stands for
    enum class Shape { kBox, kParameter, kConstant, kCollective, kRoot, kGroup } shape = Shape::kBox;
  };
  void setLook(Look look);
  const Look& look() const { return look_; }
  std::optional<HloSharding> sharding() const { return sharding_; }
  void setSharding(std::optional<HloSharding> s) { sharding_ = std::move(s); }
  // The tooltip is written when the pointer rests on the node (GraphView::viewportEvent); a
  // restyle marks it out of date.
  bool toolTipCurrent() const { return tooltip_current_; }
  void setToolTipCurrent(bool on) { tooltip_current_ = on; }
  void setSelectedNode(bool on);
  bool isSelectedNode() const { return selected_; }
  void setMatch(bool on);

 protected:
  void mousePressEvent(QGraphicsSceneMouseEvent* event) override;
  void mouseDoubleClickEvent(QGraphicsSceneMouseEvent* event) override;
  void hoverEnterEvent(QGraphicsSceneHoverEvent* event) override;
  void hoverLeaveEvent(QGraphicsSceneHoverEvent* event) override;
  void contextMenuEvent(QGraphicsSceneContextMenuEvent* event) override;

 private:
  QPainterPath outline(const QRectF& r) const;
  GraphView* view_;
  std::string key_;
  int64_t id_;
  int scope_;
  int run_;
  QRectF rect_;
  Look look_;
  std::optional<HloSharding> sharding_;
  bool selected_ = false, match_ = false, hover_ = false, tooltip_current_ = false;
};

// One edge between two visible nodes; `count` data edges when it bundles several (drawn "×N").
class GraphEdgeItem : public QGraphicsPathItem {
 public:
  explicit GraphEdgeItem(const HierarchyEdge& edge);
  const std::string& tail() const { return tail_; }
  const std::string& head() const { return head_; }
  int count() const { return count_; }
  void setEmphasis(bool on, const QPalette& palette);
  QRectF boundingRect() const override;
  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget* widget) override;

 private:
  std::string tail_, head_;
  int count_ = 1;
  bool nested_ = false;  // leaves or enters a group through its frame: drawn faint unless emphasised
  QPolygonF arrow_;
  QPointF label_at_;
};

class GraphClusterItem : public QGraphicsItem {
 public:
  GraphClusterItem(GraphView* view, int scope, const QString& label, const QRectF& rect, int depth);
  QRectF boundingRect() const override { return rect_.adjusted(-1, -1, 1, 1); }
  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget* widget) override;
  int scope() const { return scope_; }
  QRectF rect() const { return rect_; }
  const QString& label() const { return label_; }

 protected:
  void mouseDoubleClickEvent(QGraphicsSceneMouseEvent* event) override;
  void contextMenuEvent(QGraphicsSceneContextMenuEvent* event) override;

 private:
  GraphView* view_;
  int scope_;
  QString label_;
  QRectF rect_;
  int depth_;
};

// A small overview in the corner of the graph: the open groups' frames (labelled where there is
// room), every node in its colour, and the visible part; click or drag to move there.
class GraphMiniMap : public QWidget {
  Q_OBJECT
 public:
  explicit GraphMiniMap(GraphView* view);
  void invalidate();  // the scene changed: render it again (throttled)

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;

 private:
  QRectF sceneTarget() const;
  void moveTo(const QPointF& p);
  GraphView* view_;
  QPixmap cache_;
  bool dirty_ = true;
};

class GraphView : public QGraphicsView {
  Q_OBJECT
 public:
  explicit GraphView(QWidget* parent = nullptr);
  ~GraphView() override;

  void setDocument(DocumentModel* doc);
  DocumentModel* document() const { return doc_; }
  // The tracker its layouts run through (the session's). Without one the view makes its own.
  void setJobTracker(JobTracker* jobs);

  // Which computation is shown ("" = the entry).
  void setComputation(const QString& name);
  QString computation() const;

  // Layout state.
  bool isLayoutPending() const { return layout_pending_; }
  const HierarchyLayout* currentLayout() const { return layout_.get(); }
  int layoutsApplied() const { return layouts_applied_; }
  int layoutsCancelled() const { return layouts_cancelled_; }
  int recolourCount() const { return recolours_; }

  // Items (for the minimap, search and tests).
  GraphNodeItem* nodeForInstruction(int64_t id) const;  // nullptr when hidden in a group
  GraphNodeItem* nodeForKey(const std::string& key) const;
  GraphClusterItem* clusterForScope(int scope) const;  // the frame of an open group
  QList<GraphNodeItem*> nodes() const;
  QList<GraphClusterItem*> clusters() const;
  const ScopeTree* scopeTree() const { return tree_.get(); }
  // The visible form of the tree as laid out now (nullptr before the first layout).
  const VisibleTree* visibleTree() const { return shown_.get(); }
  const ViewState& viewState() const { return state_; }

  // Groups. Each change lays out again (only what changed is new work).
  void expandScope(int scope);
  void collapseScope(int scope);
  void expandAll();
  // Below this zoom, revealing an instruction (search, the table, the "why" links) zooms to 100%
  // around it; at or above it the zoom stays and the node is centred.
  static constexpr double kReadableScale = 0.75;
  // "Expand all" as the user asks it: a graph above kExpandAllWarnAt instructions first says how
  // many it would lay out and offers one more level instead (requestExpandAllChoice decides; the
  // default asks with a message box).
  static constexpr int64_t kExpandAllWarnAt = 5000;
  enum class ExpandAllChoice { kAll, kOneLevel, kCancel };
  void requestExpandAll();
  std::function<ExpandAllChoice(int64_t instructions)> requestExpandAllChoice;
  // Expands every group inside the groups open now (one level down), folded runs staying folded.
  void expandOneLevel();
  void collapseAll();
  // Repeated groups: folded into one node each ("layer × 64"), or shown one by one.
  void setFoldRepeats(bool on);
  bool foldRepeats() const { return state_.fold_repeats; }
  void unfoldRun(int run);
  void foldRun(int run);
  // What differs between the groups of a run: one line per group that is not like the first (its
  // instructions sharded differently); empty when they are all alike.
  QStringList runDifferences(int run) const;
  // Makes `id` visible (expanding exactly the groups holding it, unfolding its run) and centres it
  // once laid out.
  void reveal(int64_t id);

  // Search by name, opcode or sharding (HLO text or named axes). Highlights matches (and the groups
  // holding them, after every layout); returns them.
  QList<int64_t> setSearch(const QString& text);
  // True when the search index is built for the tree and the shardings as they are: a graph of
  // kSearchIndexInBackgroundAt instructions or more has it built in the background as soon as they
  // change, a smaller one on its first search.
  static constexpr size_t kSearchIndexInBackgroundAt = 5000;
  bool searchIndexCurrent() const {
    return search_index_ && search_index_generation_ == search_generation_ && search_index_->tree() == tree_.get();
  }

 public slots:
  void zoomIn();
  void zoomOut();
  void fitAll();
  // Fits when the whole graph stays readable, else fits the width and shows the top.
  void fitReadable();
  void resetZoom();
  void recolour();  // reads the shardings again and restyles every item (no layout)

 signals:
  void layoutFinished();
  void zoomChanged(double scale);

 protected:
  void wheelEvent(QWheelEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void scrollContentsBy(int dx, int dy) override;
  void mousePressEvent(QMouseEvent* event) override;
  void changeEvent(QEvent* event) override;
  void drawBackground(QPainter* painter, const QRectF& rect) override;
  bool viewportEvent(QEvent* event) override;

 private:
  void showReadable(GraphNodeItem* node);
  friend class GraphNodeItem;
  friend class GraphClusterItem;
  void onModuleReset();
  void resetTree();
  void requestLayout();
  void applyLayout(std::shared_ptr<const HierarchyLayout> layout, std::shared_ptr<const VisibleTree> visible);
  void followSelection();  // the document's selection changed
  void updateSelection();  // highlight the selected node (or the group holding it)
  void highlightMatches();
  void scaleBy(double factor);
  void updateMiniMapVisibility();
  // Writes the node's tooltip when it is out of date.
  void ensureToolTip(GraphNodeItem* item) const;
  // Keeps the node or frame `key` where it is on screen across the next layout.
  void anchorOn(const std::string& key);
  std::pair<double, double> nodeSize(const VisibleTree::Item& item);
  GraphNodeItem::Look lookFor(const GraphNodeItem* item) const;
  QString toolTipFor(const GraphNodeItem* item) const;
  // The items' looks from the document's shardings as they are (recolour() reads them again).
  void restyle();
  // What a collapsed group's look says of the instructions below it; kept until the shardings,
  // annotations, mesh or tree change.
  struct GroupStats {
    int64_t count = 0, sharded = 0, user = 0;
    std::optional<HloSharding> common;  // the first sharding met
    bool uniform = true;                // every sharded instruction has `common`
  };
  const GroupStats& groupStats(int scope) const;
  // A collapsed group's or a folded run's stats summed over its groups (pointers into group_stats_).
  struct GroupSummary {
    QString title, path;
    int64_t groups = 1, count = 0, sharded = 0, user = 0;
    const HloSharding* common = nullptr;
    bool uniform = true;
  };
  GroupSummary groupSummary(const GraphNodeItem* item) const;
  const Computation* currentComputation() const;

  JobTracker* jobTracker();
  QString layoutJobKey() const { return QString("layout:%1").arg(reinterpret_cast<quintptr>(this)); }

  QPointer<DocumentModel> doc_;
  QPointer<JobTracker> jobs_;
  JobTracker* own_jobs_ = nullptr;
  QGraphicsScene* scene_;
  GraphMiniMap* minimap_;
  QString computation_name_;
  std::shared_ptr<const ScopeTree> tree_;
  ViewState state_;
  std::shared_ptr<const VisibleTree> shown_;    // what the items show
  std::shared_ptr<const VisibleTree> pending_;  // what the running layout will show
  std::shared_ptr<const HierarchyLayout> layout_;
  std::unordered_map<std::string, GraphNodeItem*> nodes_;
  std::unordered_map<int, GraphClusterItem*> clusters_;
  std::vector<GraphEdgeItem*> edges_;
  std::unordered_map<std::string, std::pair<double, double>> size_cache_;
  mutable std::unordered_map<int, GroupStats> group_stats_;
  mutable std::unordered_map<int, QStringList> run_differences_;
  quint64 layout_request_ = 0;
  bool layout_pending_ = false;
  bool fit_after_layout_ = false;
  int64_t center_after_layout_ = -1;
  std::string anchor_key_;
  QPointF anchor_pos_;  // in viewport coordinates
  int layouts_applied_ = 0;
  int layouts_cancelled_ = 0;
  int recolours_ = 0;
  std::set<int64_t> matches_;
  // setSearch's index (graph_search_index.h) of tree_ with the shardings as they are. A tree or a
  // set of shardings makes it out of date; a graph of kSearchIndexInBackgroundAt instructions or
  // more has it built again at once on the layout lane, a smaller one when it is searched.
  void invalidateSearchIndex();
  const GraphSearchIndex& searchIndex();
  std::shared_ptr<const GraphSearchIndex> search_index_;
  quint64 search_generation_ = 1;        // the tree's and the shardings' state
  quint64 search_index_generation_ = 0;  // the state search_index_ was built for
};

// The graph view with its toolbar: computation chooser, search (Ctrl+F), fit and zoom, expand and
// collapse all, fold repeated groups.
class GraphPane : public QWidget {
  Q_OBJECT
 public:
  explicit GraphPane(QWidget* parent = nullptr);
  void setDocument(DocumentModel* doc);
  void setJobTracker(JobTracker* jobs);
  GraphView* view() const { return view_; }
  QLineEdit* searchField() const { return search_; }
  QToolButton* foldButton() const { return fold_; }
  // True when the toolbar is in two rows (search above the buttons): the pane is too narrow for one.
  bool toolbarStacked() const;

 public slots:
  void focusSearch();
  void findNext();
  void findPrevious();

 private:
  void refreshComputations();
  void onSearchTextChanged(const QString& text);
  void jumpTo(int index);
  void resizeEvent(QResizeEvent* event) override;
  void arrangeToolbar();

  GraphView* view_;
  QBoxLayout* bars_ = nullptr;  // the search row and the buttons row: side by side, or stacked
  QLayout* search_row_ = nullptr;
  QLayout* buttons_row_ = nullptr;
  QComboBox* computations_;
  QLineEdit* search_;
  QLabel* match_label_;
  QLabel* zoom_label_;
  QToolButton* fold_;
  QList<int64_t> matches_;
  int match_index_ = -1;
  QPointer<DocumentModel> doc_;
};

}  // namespace shardscope::views
