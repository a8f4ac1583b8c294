// The computation graph: Graphviz dot layout (a job on the tracker's layout lane, cached per
// module and expansion state) drawn as QGraphicsItems. Each tensor is coloured by its sharding;
// user annotations have a thick border; hovering shows the named-axis notation and the per-device
// shape. Large graphs collapse into clusters by name scope (double-click to expand or collapse).
// Annotation edits recolour the existing items and never lay out again.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include <QGraphicsItem>
#include <QGraphicsView>
#include <QPointer>
#include <QWidget>

#include "core/sharding/sharding.h"
#include "views/graph_layout.h"
#include "views/graph_structure.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QToolButton;

namespace shardscope::views {

class DocumentModel;
class GraphView;
class JobTracker;

// One node: an instruction, or a collapsed name scope (a group).
class GraphNodeItem : public QGraphicsItem {
 public:
  GraphNodeItem(GraphView* view, std::string key, int64_t instruction_id, int scope, const QRectF& rect);

  QRectF boundingRect() const override;
  QPainterPath shape() const override;
  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget* widget) override;

  const std::string& key() const { return key_; }
  int64_t instructionId() const { return id_; }  // -1 for a group
  int scope() const { return scope_; }           // group's scope, -1 for an instruction
  bool isGroup() const { return id_ < 0; }
  QRectF rect() const { return rect_; }

  // Appearance, set by GraphView::recolour().
  struct Look {
    QStringList lines;     // opcode, name, shape (or the group's title lines)
    QString sharding_line; // named-axis notation (elided when drawn)
    QColor fill;
    bool user = false;     // user annotation: thick border
    bool sharded = false;  // false: dashed border
    enum class Shape { kBox, kParameter, kConstant, kCollective, kRoot, kGroup } shape = Shape::kBox;
  };
  void setLook(Look look);
  const Look& look() const { return look_; }
  std::optional<HloSharding> sharding() const { return sharding_; }
  void setSharding(std::optional<HloSharding> s) { sharding_ = std::move(s); }
  void setSelectedNode(bool on);
  bool isSelectedNode() const { return selected_; }
  void setMatch(bool on);

 protected:
  void mousePressEvent(QGraphicsSceneMouseEvent* event) override;
  void mouseDoubleClickEvent(QGraphicsSceneMouseEvent* event) override;
  void hoverEnterEvent(QGraphicsSceneHoverEvent* event) override;
  void hoverLeaveEvent(QGraphicsSceneHoverEvent* event) override;

 private:
  QPainterPath outline(const QRectF& r) const;
  GraphView* view_;
  std::string key_;
  int64_t id_;
  int scope_;
  QRectF rect_;
  Look look_;
  std::optional<HloSharding> sharding_;
  bool selected_ = false, match_ = false, hover_ = false;
};

class GraphEdgeItem : public QGraphicsPathItem {
 public:
  GraphEdgeItem(const LayoutEdgePath& path);
  const std::string& tail() const { return tail_; }
  const std::string& head() const { return head_; }
  void setEmphasis(bool on, const QPalette& palette);
  QRectF boundingRect() const override;
  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget* widget) override;

 private:
  std::string tail_, head_;
  QPolygonF arrow_;
};

class GraphClusterItem : public QGraphicsItem {
 public:
  GraphClusterItem(GraphView* view, int scope, const QString& label, const QRectF& rect, int depth);
  QRectF boundingRect() const override { return rect_.adjusted(-1, -1, 1, 1); }
  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget* widget) override;
  int scope() const { return scope_; }

 protected:
  void mouseDoubleClickEvent(QGraphicsSceneMouseEvent* event) override;

 private:
  GraphView* view_;
  int scope_;
  QString label_;
  QRectF rect_;
  int depth_;
};

// A small overview in the corner of the graph: the whole scene and the visible part; click or
// drag to move there.
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
  const LayoutResult* currentLayout() const { return layout_.get(); }
  int layoutsApplied() const { return layouts_applied_; }
  int recolourCount() const { return recolours_; }

  // Items (for the minimap, search and tests).
  GraphNodeItem* nodeForInstruction(int64_t id) const;  // nullptr when hidden in a group
  GraphNodeItem* nodeForKey(const std::string& key) const;
  QList<GraphNodeItem*> nodes() const;
  const ScopeTree* scopeTree() const { return tree_.get(); }

  // Name scopes.
  void expandScope(int scope);
  void collapseScope(int scope);
  void expandAll();
  void collapseAll();
  // Makes `id` visible (expanding scopes as needed) and centres it once laid out.
  void reveal(int64_t id);

  // Search by name, opcode or sharding (HLO text or named axes). Highlights matches; returns them.
  QList<int64_t> setSearch(const QString& text);

 public slots:
  void zoomIn();
  void zoomOut();
  void fitAll();
  // Fits when the whole graph stays readable, else fits the width and shows the top.
  void fitReadable();
  void resetZoom();
  void recolour();

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

 private:
  friend class GraphNodeItem;
  friend class GraphClusterItem;
  void onModuleReset();
  void requestLayout();
  void applyLayout(std::shared_ptr<const LayoutResult> layout, const VisibleGraph& visible);
  void updateSelection();
  void scaleBy(double factor);
  void updateMiniMapVisibility();
  std::pair<double, double> nodeSize(int64_t id, int scope) const;
  GraphNodeItem::Look lookFor(const GraphNodeItem* item, QString* tooltip) const;
  const Computation* currentComputation() const;

  JobTracker* jobTracker();

  QPointer<DocumentModel> doc_;
  QPointer<JobTracker> jobs_;
  JobTracker* own_jobs_ = nullptr;
  QGraphicsScene* scene_;
  GraphMiniMap* minimap_;
  QString computation_name_;
  std::unique_ptr<ScopeTree> tree_;
  std::set<int> expanded_;
  std::unique_ptr<VisibleGraph> visible_;
  std::shared_ptr<const LayoutResult> layout_;
  std::unordered_map<std::string, GraphNodeItem*> nodes_;
  std::vector<GraphEdgeItem*> edges_;
  quint64 layout_request_ = 0;
  bool layout_pending_ = false;
  bool fit_after_layout_ = false;
  int64_t center_after_layout_ = -1;
  int layouts_applied_ = 0;
  int recolours_ = 0;
  std::set<int64_t> matches_;
};

// The graph view with its toolbar: computation chooser, search (Ctrl+F), fit and zoom, expand and
// collapse all.
class GraphPane : public QWidget {
  Q_OBJECT
 public:
  explicit GraphPane(QWidget* parent = nullptr);
  void setDocument(DocumentModel* doc);
  void setJobTracker(JobTracker* jobs);
  GraphView* view() const { return view_; }
  QLineEdit* searchField() const { return search_; }

 public slots:
  void focusSearch();
  void findNext();
  void findPrevious();

 private:
  void refreshComputations();
  void onSearchTextChanged(const QString& text);
  void jumpTo(int index);

  GraphView* view_;
  QComboBox* computations_;
  QLineEdit* search_;
  QLabel* match_label_;
  QLabel* zoom_label_;
  QList<int64_t> matches_;
  int match_index_ = -1;
  QPointer<DocumentModel> doc_;
};

}  // namespace shardscope::views
