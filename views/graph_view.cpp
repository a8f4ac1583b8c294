#include "core/base/units.h"
#include "views/graph_view.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <unordered_map>

#include <QApplication>
#include <QComboBox>
#include <QElapsedTimer>
#include <QGraphicsScene>
#include <QGraphicsSceneContextMenuEvent>
#include <QGraphicsSceneMouseEvent>
#include <QHelpEvent>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMessageBox>
#include <QPushButton>
#include <QPainter>
#include <QPaintEngine>
#include <QScrollBar>
#include <QStyleOptionGraphicsItem>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>
#include <QWheelEvent>

#include "core/ir/opcodes.h"
#include "views/document_model.h"
#include "views/job_tracker.h"
#include "views/sharding_style.h"

namespace shardscope::views {


namespace {

using Lane = JobTracker::Lane;

QString Q(const std::string& s) { return QString::fromStdString(s); }

// Nodes visible at open: the tree opens level by level while about this many stay visible.
constexpr int64_t kOpenBudget = 120;

QFont NodeFont(const QFont& base) {
  QFont f = base;
  f.setPointSizeF(std::max(7.0, base.pointSizeF() * 0.9));
  return f;
}

QFont BoldFont(const QFont& base) {
  QFont f = NodeFont(base);
  f.setBold(true);
  return f;
}

QColor EdgeColor(const QPalette& pal) {
  QColor c = pal.color(QPalette::Text);
  c.setAlpha(145);  // a 1-pixel pen: as dark as the 1.2-pixel one at 120 was
  return c;
}

// Qt's raster engine (6.4) strokes a cosmetic pen at most one pixel wide by writing the pixels
// itself only when the painter has a rectangular clip of its own: under the widget's clip alone it
// makes spans of the stroke and hands every batch of 255 to its painting threads, waiting for them
// (about 8 hand-offs for an edge across the view: 100-300 ms per paint of a view crossed by 600
// edges, against ~10 ms this way). The clip is the device itself: nothing is cut off. Only for the
// raster engine with a transform that keeps rectangles (the view's), and when there is no clip yet.
void ClipToDevice(QPainter* painter) {
  const QPaintEngine* engine = painter->paintEngine();
  if (!engine || engine->type() != QPaintEngine::Raster || painter->hasClipping()) return;
  const QTransform& t = painter->worldTransform();
  if (t.type() > QTransform::TxScale || !t.isInvertible()) return;
  const QPaintDevice* device = painter->device();
  painter->setClipRect(t.inverted().mapRect(QRectF(0, 0, device->width(), device->height())));
}

}  // namespace

// ---- GraphNodeItem -----------------------------------------------------------------------------------

GraphNodeItem::GraphNodeItem(GraphView* view, std::string key, int64_t instruction_id, int scope, const QRectF& rect,
                             int run)
    : view_(view), key_(std::move(key)), id_(instruction_id), scope_(scope), run_(run), rect_(rect) {
  setAcceptHoverEvents(true);
  setZValue(2);
  setCursor(Qt::PointingHandCursor);
}

QRectF GraphNodeItem::boundingRect() const { return rect_.adjusted(-5, -5, 9, 9); }

QPainterPath GraphNodeItem::shape() const {
  QPainterPath p;
  p.addRect(rect_);
  return p;
}

QPainterPath GraphNodeItem::outline(const QRectF& r) const {
  QPainterPath p;
  switch (look_.shape) {
    case Look::Shape::kParameter:
      p.addRoundedRect(r, r.height() / 2.6, r.height() / 2.6);
      break;
    case Look::Shape::kCollective: {
      const double c = std::min(10.0, r.height() / 4);
      QPolygonF poly;
      poly << QPointF(r.left() + c, r.top()) << QPointF(r.right() - c, r.top()) << QPointF(r.right(), r.top() + c)
           << QPointF(r.right(), r.bottom() - c) << QPointF(r.right() - c, r.bottom())
           << QPointF(r.left() + c, r.bottom()) << QPointF(r.left(), r.bottom() - c) << QPointF(r.left(), r.top() + c);
      poly << poly.front();
      p.addPolygon(poly);
      break;
    }
    case Look::Shape::kGroup:
      p.addRoundedRect(r, 3, 3);
      break;
    default:
      p.addRoundedRect(r, 6, 6);
  }
  return p;
}

void GraphNodeItem::paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget*) {
  const QPalette pal = view_->palette();
  const double lod = option->levelOfDetailFromTransform(painter->worldTransform());
  painter->setRenderHint(QPainter::Antialiasing, true);
  const QRectF r = rect_;
  // Selection / search halo.
  if (selected_ || match_) {
    QColor halo = selected_ ? pal.color(QPalette::Highlight) : QColor(255, 190, 0);
    painter->setPen(QPen(halo, selected_ ? 5 : 4));
    painter->setBrush(Qt::NoBrush);
    painter->drawPath(outline(r.adjusted(-3, -3, 3, 3)));
  }
  if (look_.shape == Look::Shape::kGroup) {  // a stacked look for collapsed groups, deeper for runs
    painter->setPen(QPen(look_.fill.darker(150), 1));
    for (int k = look_.repeat > 0 ? 2 : 1; k >= 1; --k) {
      painter->setBrush(look_.fill.darker(100 + 8 * k));
      painter->drawPath(outline(r.translated(4 * k, 4 * k)));
    }
  }
  QColor border = look_.fill.darker(IsDarkPalette(pal) ? 60 : 175);
  if (IsDarkPalette(pal)) border = look_.fill.lighter(170);
  QPen pen(border, look_.user ? 3.5 : 1.2);
  if (!look_.sharded) {
    pen = QPen(pal.color(QPalette::Mid), 1.2, Qt::DashLine);
  }
  if (hover_) pen.setColor(pal.color(QPalette::Highlight));
  painter->setPen(pen);
  painter->setBrush(look_.fill);
  painter->drawPath(outline(r));
  if (look_.shape == Look::Shape::kRoot) {
    painter->setPen(QPen(border, 1));
    painter->setBrush(Qt::NoBrush);
    painter->drawPath(outline(r.adjusted(3, 3, -3, -3)));
  }
  if (lod < 0.35) return;  // too small to read: colour only
  const QColor text = TextColorOn(look_.fill);
  const QFont bold = BoldFont(view_->font());
  const QFont normal = NodeFont(view_->font());
  const QFontMetricsF fm(normal);
  const double lh = fm.height();
  double y = r.top() + 5;
  const QRectF inner = r.adjusted(8, 0, -8, 0);
  for (int i = 0; i < look_.lines.size(); ++i) {
    painter->setFont(i == 0 ? bold : normal);
    QColor c = text;
    if (i >= 2) c.setAlpha(190);
    painter->setPen(c);
    const QString line = QFontMetricsF(painter->font()).elidedText(look_.lines[i], Qt::ElideMiddle, inner.width());
    painter->drawText(QRectF(inner.left(), y, inner.width(), lh), Qt::AlignHCenter | Qt::AlignVCenter, line);
    y += lh;
  }
  if (!look_.sharding_line.isEmpty()) {
    QFont sf = normal;
    sf.setItalic(!look_.user);
    sf.setBold(look_.user);
    painter->setFont(sf);
    painter->setPen(text);
    const QString line = QFontMetricsF(sf).elidedText(look_.sharding_line, Qt::ElideRight, inner.width());
    painter->drawText(QRectF(inner.left(), y, inner.width(), lh), Qt::AlignHCenter | Qt::AlignVCenter, line);
  }
  if (look_.user) {  // a pin in the corner marks a user annotation
    const QPointF c(r.right() - 7, r.top() + 7);
    painter->setPen(Qt::NoPen);
    painter->setBrush(border);
    painter->drawEllipse(c, 3.2, 3.2);
  }
}

void GraphNodeItem::setLook(Look look) {
  look_ = std::move(look);
  update();
}

void GraphNodeItem::setSelectedNode(bool on) {
  if (selected_ == on) return;
  selected_ = on;
  setZValue(on ? 3 : 2);
  update();
}

void GraphNodeItem::setMatch(bool on) {
  if (match_ == on) return;
  match_ = on;
  update();
}

void GraphNodeItem::mousePressEvent(QGraphicsSceneMouseEvent* event) {
  if (event->button() == Qt::LeftButton && view_->document()) {
    if (!isGroup()) view_->document()->select(id_);
    event->accept();
    return;
  }
  QGraphicsItem::mousePressEvent(event);
}

void GraphNodeItem::mouseDoubleClickEvent(QGraphicsSceneMouseEvent* event) {
  if (run_ >= 0) {
    view_->unfoldRun(run_);
    event->accept();
    return;
  }
  if (isGroup()) {
    view_->expandScope(scope_);
    event->accept();
    return;
  }
  QGraphicsItem::mouseDoubleClickEvent(event);
}

void GraphNodeItem::contextMenuEvent(QGraphicsSceneContextMenuEvent* event) {
  const ScopeTree* tree = view_->scopeTree();
  if (!tree) return;
  QMenu menu;
  if (run_ >= 0) {
    const RepeatRun& run = tree->runs()[static_cast<size_t>(run_)];
    menu.addAction(QString("Show the %1 groups one by one").arg(run.members.size()), [this] { view_->unfoldRun(run_); });
  } else if (isGroup()) {
    menu.addAction("Expand", [this] { view_->expandScope(scope_); });
    const int run = tree->scope(scope_).run;
    if (run >= 0 && !view_->viewState().folded(run)) {
      menu.addAction(QString("Fold the %1 repeats").arg(tree->runs()[static_cast<size_t>(run)].members.size()),
                     [this, run] { view_->foldRun(run); });
    }
  } else {
    const int scope = tree->scopeOf(id_);
    if (scope <= 0) return;
    menu.addAction(QString("Collapse %1").arg(QString::fromStdString(tree->scope(scope).label)),
                   [this, scope] { view_->collapseScope(scope); });
  }
  menu.exec(event->screenPos());
  event->accept();
}

void GraphNodeItem::hoverEnterEvent(QGraphicsSceneHoverEvent*) {
  hover_ = true;
  update();
}

void GraphNodeItem::hoverLeaveEvent(QGraphicsSceneHoverEvent*) {
  hover_ = false;
  update();
}

// ---- GraphEdgeItem ---------------------------------------------------------------------------------

GraphEdgeItem::GraphEdgeItem(const HierarchyEdge& e)
    : tail_(e.tail), head_(e.head), count_(e.count), nested_(e.nested) {
  QPainterPath path;
  if (!e.points.empty()) {
    path.moveTo(e.points[0].first, e.points[0].second);
    size_t i = 1;
    for (; i + 2 < e.points.size(); i += 3) {
      path.cubicTo(e.points[i].first, e.points[i].second, e.points[i + 1].first, e.points[i + 1].second,
                   e.points[i + 2].first, e.points[i + 2].second);
    }
    for (; i < e.points.size(); ++i) path.lineTo(e.points[i].first, e.points[i].second);
  }
  QPointF end = path.currentPosition();
  if (e.has_arrow) {
    const QPointF tip(e.arrow_tip.first, e.arrow_tip.second);
    path.lineTo(tip);
    QPointF dir = tip - end;
    double len = std::hypot(dir.x(), dir.y());
    if (len < 1e-6) {
      dir = QPointF(0, 1);
      len = 1;
    }
    dir /= len;
    const QPointF normal(-dir.y(), dir.x());
    const double size = 7;
    const QPointF base = tip - dir * size;
    arrow_ << tip << base + normal * size * 0.45 << base - normal * size * 0.45;
  }
  setPath(path);
  // The count of a bundled edge sits beside it, a little above its head.
  label_at_ = QPointF(e.arrow_tip.first, e.arrow_tip.second - 16);
  if (count_ > 1) setToolTip(QString("%1 data edges").arg(count_));
  setZValue(1);
  setAcceptedMouseButtons(Qt::NoButton);
}

void GraphEdgeItem::setEmphasis(bool on, const QPalette& pal) {
  QColor faint = EdgeColor(pal);
  faint.setAlpha(45);
  // One device pixel wide (and cosmetic: stroked in device pixels) unless emphasised: Qt's raster
  // engine draws such a pen itself, pixel by pixel (see paint()); a wider one is outlined, filled and
  // its spans handed to Qt's painting threads. A long edge crossing the view at a large scale costs a
  // few milliseconds as a cosmetic pen, against tens with a pen stroked in scene units.
  QPen pen = on ? QPen(pal.color(QPalette::Highlight), 2.2) : nested_ ? QPen(faint, 1.0) : QPen(EdgeColor(pal), 1.0);
  pen.setCosmetic(true);
  setPen(pen);
  setZValue(on ? 1.5 : 1);
}

QRectF GraphEdgeItem::boundingRect() const {
  QRectF r = QGraphicsPathItem::boundingRect().united(arrow_.boundingRect());
  if (count_ > 1) r = r.united(QRectF(label_at_ + QPointF(2, -10), QSizeF(48, 14)));
  return r.adjusted(-2, -2, 2, 2);
}

void GraphEdgeItem::paint(QPainter* painter, const QStyleOptionGraphicsItem*, QWidget*) {
  ClipToDevice(painter);
  painter->setRenderHint(QPainter::Antialiasing, true);
  painter->setPen(pen());
  painter->setBrush(Qt::NoBrush);
  painter->drawPath(path());
  if (!arrow_.isEmpty()) {
    painter->setPen(Qt::NoPen);
    painter->setBrush(pen().color());
    painter->drawPolygon(arrow_);
  }
  if (count_ > 1 && painter->worldTransform().m11() > 0.3) {
    QFont f = painter->font();
    f.setPointSizeF(std::max(6.5, f.pointSizeF() * 0.8));
    painter->setFont(f);
    painter->setPen(pen().color());
    painter->drawText(QRectF(label_at_ + QPointF(4, -10), QSizeF(48, 14)), Qt::AlignLeft | Qt::AlignVCenter,
                      QString::fromUtf8("\u00D7%1").arg(count_));
  }
}

// ---- GraphClusterItem --------------------------------------------------------------------------------

GraphClusterItem::GraphClusterItem(GraphView* view, int scope, const QString& label, const QRectF& rect, int depth)
    : view_(view), scope_(scope), label_(label), rect_(rect), depth_(depth) {
  setZValue(0);
  setToolTip(QString("%1 — double-click the header to collapse").arg(label));
}

void GraphClusterItem::paint(QPainter* painter, const QStyleOptionGraphicsItem*, QWidget*) {
  const QPalette pal = view_->palette();
  painter->setRenderHint(QPainter::Antialiasing, true);
  QColor fill = pal.color(QPalette::AlternateBase);
  fill = IsDarkPalette(pal) ? fill.lighter(100 + 8 * depth_) : fill.darker(100 + 3 * depth_);
  painter->setBrush(fill);
  painter->setPen(QPen(pal.color(QPalette::Mid), 1, Qt::SolidLine));
  painter->drawRoundedRect(rect_, 8, 8);
  QFont f = NodeFont(view_->font());
  f.setBold(true);
  painter->setFont(f);
  QColor tc = pal.color(QPalette::Text);
  tc.setAlpha(170);
  painter->setPen(tc);
  painter->drawText(rect_.adjusted(8, 3, -8, 0), Qt::AlignLeft | Qt::AlignTop,
                    QFontMetricsF(f).elidedText(QString::fromUtf8("\u25BE ") + label_, Qt::ElideMiddle, rect_.width() - 16));
}

void GraphClusterItem::mouseDoubleClickEvent(QGraphicsSceneMouseEvent* event) {
  view_->collapseScope(scope_);
  event->accept();
}

void GraphClusterItem::contextMenuEvent(QGraphicsSceneContextMenuEvent* event) {
  QMenu menu;
  menu.addAction(QString("Collapse %1").arg(label_), [this] { view_->collapseScope(scope_); });
  if (const ScopeTree* tree = view_->scopeTree()) {
    const int run = tree->scope(scope_).run;
    if (run >= 0) {
      menu.addAction(QString("Fold the %1 repeats").arg(tree->runs()[static_cast<size_t>(run)].members.size()),
                     [this, run] { view_->foldRun(run); });
    }
  }
  menu.exec(event->screenPos());
  event->accept();
}

// ---- GraphMiniMap ------------------------------------------------------------------------------------

GraphMiniMap::GraphMiniMap(GraphView* view) : QWidget(view), view_(view) {
  setFixedSize(220, 150);
  setCursor(Qt::CrossCursor);
  setToolTip("Overview: click or drag to move the view");
}

void GraphMiniMap::invalidate() {
  dirty_ = true;
  update();
}

QRectF GraphMiniMap::sceneTarget() const {
  const QRectF sr = view_->scene() ? view_->scene()->sceneRect() : QRectF();
  if (sr.isEmpty()) return {};
  const QRectF area = QRectF(rect()).adjusted(4, 4, -4, -4);
  const double s = std::min(area.width() / sr.width(), area.height() / sr.height());
  const QSizeF size(sr.width() * s, sr.height() * s);
  return QRectF(area.center() - QPointF(size.width() / 2, size.height() / 2), size);
}

void GraphMiniMap::paintEvent(QPaintEvent*) {
  QPainter p(this);
  const QPalette pal = view_->palette();
  QColor bg = pal.color(QPalette::Window);
  bg.setAlpha(225);
  p.fillRect(rect(), bg);
  p.setPen(pal.color(QPalette::Mid));
  p.drawRect(rect().adjusted(0, 0, -1, -1));
  if (!view_->scene()) return;
  const QRectF target = sceneTarget();
  if (target.isEmpty()) return;
  if (dirty_ || cache_.size() != size() * devicePixelRatioF()) {
    cache_ = QPixmap(size() * devicePixelRatioF());
    cache_.setDevicePixelRatio(devicePixelRatioF());
    cache_.fill(Qt::transparent);
    QPainter cp(&cache_);
    // Drawn from the items rather than rendered: frames, then nodes as blocks of their colour,
    // then the labels of what is large enough to read (the open groups, collapsed groups, runs).
    const QRectF sr = view_->scene()->sceneRect();
    const double k = target.width() / sr.width();
    auto map = [&](const QRectF& r) {
      return QRectF(target.left() + (r.left() - sr.left()) * k, target.top() + (r.top() - sr.top()) * k,
                    std::max(1.0, r.width() * k), std::max(1.0, r.height() * k));
    };
    QFont small = font();
    small.setPointSizeF(std::max(6.0, small.pointSizeF() * 0.75));
    cp.setFont(small);
    const QFontMetricsF fm(small);
    const QColor frame = pal.color(QPalette::Mid);
    QColor text = pal.color(QPalette::Text);
    for (GraphClusterItem* c : view_->clusters()) {
      cp.setPen(QPen(frame, 1));
      QColor fill = pal.color(QPalette::AlternateBase);
      fill.setAlpha(150);
      cp.setBrush(fill);
      cp.drawRect(map(c->rect()));
    }
    cp.setPen(Qt::NoPen);
    for (GraphNodeItem* n : view_->nodes()) {
      cp.setBrush(n->isGroup() ? n->look().fill.darker(115) : n->look().fill);
      cp.drawRect(map(n->rect()));
    }
    text.setAlpha(200);
    cp.setPen(text);
    auto label = [&](const QRectF& r, const QString& t, bool top) {
      if (r.width() < 30 || (top && r.height() < 10)) return;
      const QString e = fm.elidedText(t, Qt::ElideRight, r.width() - 2);
      if (e.size() < 3) return;
      cp.drawText(QRectF(r.left() + 1, r.top(), r.width() - 2, top ? fm.height() : r.height()),
                  Qt::AlignLeft | (top ? Qt::AlignTop : Qt::AlignVCenter), e);
    };
    for (GraphClusterItem* c : view_->clusters()) label(map(c->rect()), c->label(), true);
    for (GraphNodeItem* n : view_->nodes()) {
      if (n->isGroup() && !n->look().lines.isEmpty()) label(map(n->rect()), n->look().lines.front().mid(2), false);
    }
    dirty_ = false;
  }
  p.drawPixmap(0, 0, cache_);
  const QRectF sr = view_->scene()->sceneRect();
  const QRectF visible = view_->mapToScene(view_->viewport()->rect()).boundingRect().intersected(sr);
  const double s = target.width() / sr.width();
  const QRectF vr(target.left() + (visible.left() - sr.left()) * s, target.top() + (visible.top() - sr.top()) * s,
                  visible.width() * s, visible.height() * s);
  QColor hl = pal.color(QPalette::Highlight);
  p.setPen(QPen(hl, 1.5));
  hl.setAlpha(40);
  p.setBrush(hl);
  p.drawRect(vr);
}

void GraphMiniMap::moveTo(const QPointF& pos) {
  const QRectF target = sceneTarget();
  if (target.isEmpty()) return;
  const QRectF sr = view_->scene()->sceneRect();
  const double s = target.width() / sr.width();
  view_->centerOn(sr.left() + (pos.x() - target.left()) / s, sr.top() + (pos.y() - target.top()) / s);
}

void GraphMiniMap::mousePressEvent(QMouseEvent* event) { moveTo(event->position()); }
void GraphMiniMap::mouseMoveEvent(QMouseEvent* event) {
  if (event->buttons() & Qt::LeftButton) moveTo(event->position());
}

// ---- GraphView ---------------------------------------------------------------------------------------

GraphView::GraphView(QWidget* parent) : QGraphicsView(parent), scene_(new QGraphicsScene(this)) {
  setObjectName("graphView");
  setScene(scene_);
  setRenderHints(QPainter::Antialiasing | QPainter::TextAntialiasing);
  setDragMode(QGraphicsView::ScrollHandDrag);
  setTransformationAnchor(QGraphicsView::AnchorUnderMouse);
  setResizeAnchor(QGraphicsView::AnchorViewCenter);
  setViewportUpdateMode(QGraphicsView::SmartViewportUpdate);
  setOptimizationFlag(QGraphicsView::DontAdjustForAntialiasing, true);
  minimap_ = new GraphMiniMap(this);
  minimap_->hide();
}

GraphView::~GraphView() = default;

void GraphView::setJobTracker(JobTracker* jobs) { jobs_ = jobs; }

JobTracker* GraphView::jobTracker() {
  if (jobs_) return jobs_;
  if (!own_jobs_) own_jobs_ = new JobTracker(this);
  return own_jobs_;
}

void GraphView::setDocument(DocumentModel* doc) {
  if (doc_) doc_->disconnect(this);
  doc_ = doc;
  if (!doc_) return;
  connect(doc_, &DocumentModel::moduleReset, this, &GraphView::onModuleReset);
  connect(doc_, &DocumentModel::shardingsUpdated, this, &GraphView::recolour);
  connect(doc_, &DocumentModel::annotationsChanged, this, &GraphView::recolour);
  connect(doc_, &DocumentModel::meshChanged, this, &GraphView::recolour);
  connect(doc_, &DocumentModel::selectionChanged, this, [this](qint64) { followSelection(); });
  if (doc_->hasModule()) onModuleReset();
}

const Computation* GraphView::currentComputation() const {
  if (!doc_ || !doc_->module()) return nullptr;
  const Module* m = doc_->module();
  if (!computation_name_.isEmpty()) {
    if (const Computation* c = m->FindComputation(computation_name_.toStdString())) return c;
  }
  return m->entry();
}

QString GraphView::computation() const {
  const Computation* c = currentComputation();
  return c ? Q(c->name()) : QString();
}

void GraphView::setComputation(const QString& name) {
  if (name == computation()) return;
  computation_name_ = name;
  resetTree();
}

void GraphView::onModuleReset() {
  computation_name_.clear();
  matches_.clear();
  size_cache_.clear();
  resetTree();
}

void GraphView::resetTree() {
  const Computation* c = currentComputation();
  tree_ = c ? std::make_shared<const ScopeTree>(ScopeTree::Build(*c, doc_->sharedModule())) : nullptr;
  group_stats_.clear();
  run_differences_.clear();
  state_ = ViewState{};
  if (tree_) state_.expanded = tree_->defaultExpansion(kOpenBudget);
  fit_after_layout_ = true;
  center_after_layout_ = -1;
  anchor_key_.clear();
  // The old items belong to another tree: never show them with the new one.
  scene_->clear();
  nodes_.clear();
  clusters_.clear();
  edges_.clear();
  shown_.reset();
  layout_.reset();
  requestLayout();
  invalidateSearchIndex();  // after the layout: the first paint comes first on the lane
}

std::pair<double, double> GraphView::nodeSize(const VisibleTree::Item& item) {
  const std::string key = item.key();
  auto cached = size_cache_.find(key);
  if (cached != size_cache_.end()) return cached->second;
  const QFontMetricsF fm(NodeFont(font()));
  const QFontMetricsF bm(BoldFont(font()));
  double w = 0;
  const int lines = 4;
  if (item.kind == VisibleTree::Item::Kind::kInstruction) {
    const Instruction* inst = doc_->instruction(item.id);
    if (!inst) return {120, std::round(lines * fm.height() + 10)};
    w = std::max({bm.horizontalAdvance(Q(inst->opcode_text())), fm.horizontalAdvance(Q(inst->name())),
                  fm.horizontalAdvance(ShapeText(inst->shape()))});
    const int64_t rank = inst->shape().IsArray() ? inst->shape().rank() : 2;
    QStringList dims;
    for (int64_t d = 0; d < std::max<int64_t>(rank, 1); ++d) dims << "I_XY";
    w = std::max(w, fm.horizontalAdvance("[" + dims.join(", ") + "]"));
  } else {
    QString title;
    if (item.kind == VisibleTree::Item::Kind::kFold) title = Q(tree_->runs()[static_cast<size_t>(item.id)].label);
    else title = Q(tree_->scope(static_cast<int>(item.id)).label);
    w = std::max(bm.horizontalAdvance(QString::fromUtf8("\u25B8 ") + title),
                 fm.horizontalAdvance(QString::fromUtf8("\u00D7 64 \u00B7 0000 instructions each")));
  }
  w = std::clamp(w + 22, 110.0, 300.0);
  const std::pair<double, double> size{std::round(w), std::round(lines * fm.height() + 10)};
  size_cache_[key] = size;
  return size;
}

void GraphView::requestLayout() {
  const Computation* comp = currentComputation();
  if (!comp || !tree_ || !doc_) {
    if (layout_pending_) ++layouts_cancelled_;
    jobTracker()->cancelKey(layoutJobKey());
    scene_->clear();
    nodes_.clear();
    clusters_.clear();
    edges_.clear();
    shown_.reset();
    pending_.reset();
    layout_.reset();
    layout_pending_ = false;
    minimap_->hide();
    return;
  }
  auto visible = std::make_shared<const VisibleTree>(tree_, state_);
  auto input = std::make_shared<HierarchyInput>();
  input->tree = tree_;
  input->state = state_;
  for (const auto& item : visible->visibleNodes()) input->sizes[item.key()] = nodeSize(item);
  const QFontMetricsF bm(BoldFont(font()));
  for (int s : visible->openScopes()) {
    if (s > 0) input->sizes[ClusterKey(s)] = {bm.horizontalAdvance(QString::fromUtf8("\u25BE ") + Q(tree_->scope(s).label)) + 24, 0};
  }
  // The tree's fingerprint identifies the graph (any view of any document showing the same graph
  // shares the group layouts); the font sets the node sizes, which are part of each key too.
  input->cache_prefix =
      std::to_string(tree_->fingerprint()) + "/" + comp->name() + "/" + std::to_string(font().pointSizeF());
  if (layout_pending_) ++layouts_cancelled_;  // the older layout is superseded below
  const quint64 request = ++layout_request_;
  layout_pending_ = true;
  pending_ = visible;
  // The newest layout of this view wins: an older one still queued never runs, one running stops
  // before its next group (what it laid out stays cached).
  const JobTracker::Spec spec{.label = "laying out",
                              .lane = Lane::kLayout,
                              .key = layoutJobKey(),
                              .context = this};
  jobTracker()->run<std::shared_ptr<const HierarchyLayout>>(
      spec,
      [input = std::move(input)](const CancellationToken& token) {
        return std::make_shared<const HierarchyLayout>(LayOutHierarchy(
            *input,
            [](const std::string& key, const LayoutInput& in, bool* hit) {
              return LayoutCache::instance().layOut(key, in, hit);
            },
            token));
      },
      [this, request](std::shared_ptr<const HierarchyLayout> result) {
        if (request != layout_request_) return;  // superseded
        if (!result || result->cancelled) return;
        applyLayout(std::move(result), pending_);
      });
}

void GraphView::anchorOn(const std::string& key) {
  QRectF r;
  if (GraphNodeItem* n = nodeForKey(key)) r = n->sceneBoundingRect();
  else if (!key.empty() && key[0] == 'c' && clusters_.count(std::stoi(key.substr(1))))
    r = clusters_.at(std::stoi(key.substr(1)))->rect();
  if (r.isNull()) {
    anchor_key_.clear();
    return;
  }
  anchor_key_ = key;
  anchor_pos_ = mapFromScene(r.topLeft());
}

void GraphView::applyLayout(std::shared_ptr<const HierarchyLayout> layout, std::shared_ptr<const VisibleTree> visible) {
  // Where the anchor (the group just expanded or collapsed) was, to keep it there.
  scene_->clear();
  nodes_.clear();
  clusters_.clear();
  edges_.clear();
  layout_ = std::move(layout);
  shown_ = std::move(visible);
  pending_.reset();
  layout_pending_ = false;
  if (!layout_ || !layout_->ok) {
    scene_->addText(QString("Layout failed: %1").arg(layout_ ? Q(layout_->error) : QString("no result")));
    emit layoutFinished();
    return;
  }
  for (const auto& c : layout_->clusters) {
    const ScopeNode& s = tree_->scope(c.scope);
    auto* item = new GraphClusterItem(this, c.scope, Q(s.label), QRectF(c.box.x, c.box.y, c.box.w, c.box.h), s.depth);
    scene_->addItem(item);
    clusters_[c.scope] = item;
  }
  for (const auto& e : layout_->edges) {
    auto* item = new GraphEdgeItem(e);
    item->setEmphasis(false, palette());
    scene_->addItem(item);
    edges_.push_back(item);
  }
  for (const auto& [key, box] : layout_->nodes) {
    int64_t id = -1;
    int scope = -1, run = -1;
    const int64_t number = std::stoll(key.substr(1));
    if (key[0] == 'i') id = number;
    else if (key[0] == 'g') scope = static_cast<int>(number);
    else if (key[0] == 'f') run = static_cast<int>(number);
    auto* item = new GraphNodeItem(this, key, id, scope, QRectF(box.x, box.y, box.w, box.h), run);
    scene_->addItem(item);
    nodes_[key] = item;
  }
  scene_->setSceneRect(QRectF(-20, -20, layout_->width + 40, layout_->height + 40));
  ++layouts_applied_;
  restyle();
  if (fit_after_layout_) {
    fit_after_layout_ = false;
    fitReadable();
  } else if (!anchor_key_.empty()) {
    QRectF r;
    if (GraphNodeItem* n = nodeForKey(anchor_key_)) r = n->sceneBoundingRect();
    else if (anchor_key_[0] == 'c' && clusters_.count(std::stoi(anchor_key_.substr(1))))
      r = clusters_.at(std::stoi(anchor_key_.substr(1)))->rect();
    if (!r.isNull()) {
      // Scroll so the anchor's top-left is where it was on screen.
      const QPointF now = mapFromScene(r.topLeft());
      const QPointF delta = now - anchor_pos_;
      horizontalScrollBar()->setValue(horizontalScrollBar()->value() + static_cast<int>(std::round(delta.x())));
      verticalScrollBar()->setValue(verticalScrollBar()->value() + static_cast<int>(std::round(delta.y())));
    }
  }
  anchor_key_.clear();
  updateSelection();
  highlightMatches();
  if (center_after_layout_ >= 0) {
    if (GraphNodeItem* n = nodeForKey(shown_->keyFor(center_after_layout_))) showReadable(n);
    center_after_layout_ = -1;
  }
  updateMiniMapVisibility();
  minimap_->invalidate();
  emit layoutFinished();
}

QStringList GraphView::runDifferences(int run) const {
  QStringList out;
  if (!tree_ || !doc_ || run < 0 || run >= static_cast<int>(tree_->runs().size())) return out;
  auto cached = run_differences_.find(run);
  if (cached != run_differences_.end()) return cached->second;
  const RepeatRun& r = tree_->runs()[static_cast<size_t>(run)];
  // The groups have one structure, so their instructions correspond one to one, in order. At each
  // position the sharding most groups have is the reference; a group differs where it has another.
  // Parameters are not part of the structure (the first layer may hold the model's input too).
  std::vector<std::vector<int64_t>> ids;
  std::vector<std::vector<std::optional<HloSharding>>> shardings;
  std::vector<QStringList> params;
  for (int m : r.members) {
    ids.emplace_back();
    params.emplace_back();
    for (int32_t p : tree_->positionsUnder(m)) {
      const Instruction* inst = tree_->at(p);
      if (inst->opcode() == Opcode::kParameter) params.back() << Q(inst->name());
      else ids.back().push_back(inst->id());
    }
    std::vector<std::optional<HloSharding>> row;
    row.reserve(ids.back().size());
    for (int64_t id : ids.back()) row.push_back(doc_->sharding(id));
    shardings.push_back(std::move(row));
  }
  size_t positions = ids.front().size();
  for (const auto& row : ids) positions = std::min(positions, row.size());
  std::vector<int> differ(r.members.size(), 0);
  std::vector<QString> example(r.members.size());
  for (size_t j = 0; j < positions; ++j) {
    std::vector<std::pair<size_t, int>> distinct;  // (a group holding the value, how many have it)
    for (size_t k = 0; k < shardings.size(); ++k) {
      bool found = false;
      for (auto& [holder, count] : distinct) {
        if (shardings[holder][j] == shardings[k][j]) {
          ++count;
          found = true;
          break;
        }
      }
      if (!found) distinct.emplace_back(k, 1);
    }
    if (distinct.size() == 1) continue;
    const size_t common = std::max_element(distinct.begin(), distinct.end(), [](const auto& a, const auto& b) {
                            return a.second < b.second;
                          })->first;
    for (size_t k = 0; k < shardings.size(); ++k) {
      if (shardings[k][j] == shardings[common][j]) continue;
      if (differ[k]++ == 0) {
        const Instruction* inst = doc_->instruction(ids[k][j]);
        const auto& sh = shardings[k][j];
        example[k] = QString("%1 %2").arg(inst ? Q(inst->name()) : QString("?"),
                                          sh && inst ? NamedAxesText(*sh, inst->shape(), doc_->mesh(), "") : QString("unsharded"));
      }
    }
  }
  std::map<qsizetype, int> param_counts;
  for (const auto& p : params) ++param_counts[p.size()];
  const qsizetype usual = std::max_element(param_counts.begin(), param_counts.end(), [](const auto& a, const auto& b) {
                            return a.second < b.second;
                          })->first;
  for (size_t k = 0; k < r.members.size(); ++k) {
    if (params[k].size() > usual) {
      out << QString("%1: also holds %2").arg(Q(tree_->scope(r.members[k]).label), params[k].mid(0, 3).join(", "));
    }
    if (differ[k] == 0) continue;
    out << QString("%1: %2 instruction%3 sharded unlike the others (%4)")
               .arg(Q(tree_->scope(r.members[k]).label))
               .arg(differ[k])
               .arg(differ[k] == 1 ? "" : "s")
               .arg(example[k]);
  }
  run_differences_[run] = out;
  return out;
}

GraphView::GroupSummary GraphView::groupSummary(const GraphNodeItem* item) const {
  // A collapsed group, or a folded run (all its groups).
  GroupSummary g;
  std::vector<int> scopes;
  if (item->run() >= 0) {
    const RepeatRun& run = tree_->runs()[static_cast<size_t>(item->run())];
    scopes = run.members;
    g.title = Q(run.label);
    g.path = Q(tree_->scope(run.parent).path);
  } else {
    scopes = {item->scope()};
    g.title = Q(tree_->scope(item->scope()).label);
    g.path = Q(tree_->scope(item->scope()).path);
  }
  g.groups = static_cast<int64_t>(scopes.size());
  for (int s : scopes) {
    const GroupStats& stats = groupStats(s);
    g.count += stats.count;
    g.sharded += stats.sharded;
    g.user += stats.user;
    if (!stats.uniform) g.uniform = false;
    if (!stats.common) continue;
    if (!g.common) g.common = &*stats.common;
    else if (g.uniform && !(*g.common == *stats.common)) g.uniform = false;
  }
  return g;
}

GraphNodeItem::Look GraphView::lookFor(const GraphNodeItem* item) const {
  GraphNodeItem::Look look;
  const QPalette pal = palette();
  if (item->isGroup()) {
    const GroupSummary g = groupSummary(item);
    look.shape = GraphNodeItem::Look::Shape::kGroup;
    look.sharded = g.sharded > 0;
    look.user = false;
    look.fill = (g.common && g.uniform) ? ShardingFillColor(*g.common, pal) : UnshardedFillColor(pal);
    if (item->run() >= 0) {
      const QStringList diffs = runDifferences(item->run());
      look.repeat = static_cast<int>(g.groups);
      look.lines = {QString::fromUtf8("\u25B8 ") + g.title,
                    QString::fromUtf8("\u00D7 %1 \u00B7 %2 instructions each").arg(g.groups).arg(g.count / g.groups)};
      look.sharding_line = diffs.isEmpty() ? QString("identical") : diffs.size() == 1 ? QString("1 differs") : QString("%1 differ").arg(diffs.size());
    } else {
      look.lines = {QString::fromUtf8("\u25B8 ") + g.title, QString("%1 instructions").arg(g.count)};
      look.sharding_line = QString("%1 of %2 sharded").arg(g.sharded).arg(g.count);
    }
    return look;
  }
  const Instruction* inst = doc_->instruction(item->instructionId());
  if (!inst) return look;
  const HloSharding* sh = doc_->findSharding(inst->id());
  const TensorOrigin origin = doc_->origin(inst->id());
  look.lines = {Q(inst->opcode_text()), Q(inst->name()), ShapeText(inst->shape())};
  look.user = origin == TensorOrigin::kUser;
  look.sharded = sh != nullptr;
  look.fill = sh ? ShardingFillColor(*sh, pal) : UnshardedFillColor(pal);
  look.sharding_line = sh ? NamedAxesText(*sh, inst->shape(), doc_->mesh(), "") : QString("unsharded");
  if (!doc_->propagationEnabled()) {
    // A displayed program (the SPMD one): shapes are per device, its shardings are information
    // rather than annotations, and the collectives stand out.
    if (!sh) look.sharding_line.clear();
    look.sharded = true;
    look.user = false;
    if (IsCollective(inst->opcode())) look.fill = IsDarkPalette(pal) ? QColor(150, 90, 40) : QColor(255, 196, 140);
  }
  if (inst->opcode() == Opcode::kParameter) look.shape = GraphNodeItem::Look::Shape::kParameter;
  else if (inst->opcode() == Opcode::kConstant) look.shape = GraphNodeItem::Look::Shape::kConstant;
  else if (IsCollective(inst->opcode())) look.shape = GraphNodeItem::Look::Shape::kCollective;
  else if (inst->is_root()) look.shape = GraphNodeItem::Look::Shape::kRoot;
  return look;
}

QString GraphView::toolTipFor(const GraphNodeItem* item) const {
  if (!tree_ || !doc_ || !doc_->module()) return {};
  if (item->isGroup()) {
    const GroupSummary g = groupSummary(item);
    if (item->run() >= 0) {
      const QStringList diffs = runDifferences(item->run());
      QString t = QString("<b>%1</b> (in %2)<br>%3 groups with the same operations, shapes and wiring, %4 "
                          "instructions each")
                      .arg(g.title.toHtmlEscaped(), g.path.isEmpty() ? QString("the computation") : g.path.toHtmlEscaped())
                      .arg(g.groups)
                      .arg(g.count / g.groups);
      if (diffs.isEmpty()) {
        t += "<br>and the same shardings";
      } else {
        t += "<br>Differences:<ul>";
        for (int i = 0; i < diffs.size() && i < 12; ++i) t += "<li>" + diffs[i].toHtmlEscaped() + "</li>";
        if (diffs.size() > 12) t += QString("<li>and %1 more</li>").arg(diffs.size() - 12);
        t += "</ul>";
      }
      t += "<i>Double-click to show them one by one</i>";
      return t;
    }
    const ScopeNode& s = tree_->scope(item->scope());
    QString what = "Name scope";
    if (s.kind == ScopeNode::Kind::kCall) what = "Called computations of";
    if (s.kind == ScopeNode::Kind::kChunk) what = "Part of the program in order:";
    return QString("%1 <b>%2</b><br>%3 instructions, %4 sharded, %5 annotated by you<br><i>Double-click to "
                   "expand</i>")
        .arg(what, Q(s.path).toHtmlEscaped())
        .arg(g.count)
        .arg(g.sharded)
        .arg(g.user);
  }
  const Instruction* inst = doc_->instruction(item->instructionId());
  if (!inst) return {};
  const auto sh = doc_->sharding(inst->id());
  const bool user = doc_->propagationEnabled() && doc_->origin(inst->id()) == TensorOrigin::kUser;
  QString t = QString("<b>%1</b> = %2<br>shape %3").arg(Q(inst->name()).toHtmlEscaped(), Q(inst->opcode_text()),
                                                        ShapeText(inst->shape()).toHtmlEscaped());
  if (sh) {
    t += QString("<br><b>%1</b> &nbsp;(%2)")
             .arg(NamedAxesText(*sh, inst->shape(), doc_->mesh(), Q(inst->name())).toHtmlEscaped(),
                  user ? "your annotation" : "inferred");
    t += QString("<br>HLO: <tt>%1</tt>").arg(HloShardingText(*sh).toHtmlEscaped());
    t += QString("<br>per device: %1 &middot; %2 (whole tensor %3)")
             .arg(LocalShapeText(inst->shape(), sh).toHtmlEscaped(), Q(FormatBytes(BytesPerDevice(inst->shape(), sh))),
                  Q(FormatBytes(inst->shape().ByteSize())));
  } else {
    t += "<br><i>no sharding yet</i>";
  }
  const std::string op_name = inst->op_name();
  if (!op_name.empty()) t += QString("<br><small>%1</small>").arg(Q(op_name).toHtmlEscaped());
  return t;
}

void GraphView::ensureToolTip(GraphNodeItem* item) const {
  if (item->toolTipCurrent()) return;
  item->setToolTip(toolTipFor(item));
  item->setToolTipCurrent(true);
}

bool GraphView::viewportEvent(QEvent* event) {
  // Tooltips are written when asked for (the pointer rests on a node), not for every node at every
  // layout: a node's tooltip costs more than its look (a tuple's per-device shapes, the op_name),
  // and most nodes are never hovered.
  if (event->type() == QEvent::ToolTip) {
    const QPoint at = static_cast<QHelpEvent*>(event)->pos();
    for (QGraphicsItem* item : items(at)) {
      if (auto* node = dynamic_cast<GraphNodeItem*>(item)) ensureToolTip(node);
    }
  }
  return QGraphicsView::viewportEvent(event);
}

const GraphView::GroupStats& GraphView::groupStats(int scope) const {
  auto it = group_stats_.find(scope);
  if (it != group_stats_.end()) return it->second;
  GroupStats g;
  const HloSharding* common = nullptr;
  for (int32_t p : tree_->positionsUnder(scope)) {
    const int64_t id = tree_->at(p)->id();
    ++g.count;
    const HloSharding* sh = doc_->findSharding(id);  // no copy: a group may hold 50,000 instructions
    if (doc_->origin(id) == TensorOrigin::kUser) ++g.user;
    if (!sh) continue;
    ++g.sharded;
    if (!common) common = sh;
    else if (g.uniform && common != sh && !(*common == *sh)) g.uniform = false;
  }
  if (common) g.common = *common;
  return group_stats_.emplace(scope, std::move(g)).first->second;
}

void GraphView::recolour() {
  invalidateSearchIndex();  // shardings, annotations or the mesh changed
  group_stats_.clear();
  run_differences_.clear();
  restyle();
}

void GraphView::restyle() {
  if (!doc_ || !doc_->module()) return;
  ++recolours_;
  for (auto& [key, item] : nodes_) {
    item->setLook(lookFor(item));
    item->setToolTipCurrent(false);  // written again when the pointer rests on it
    item->setSharding(item->isGroup() ? std::nullopt : doc_->sharding(item->instructionId()));
  }
  minimap_->invalidate();
  viewport()->update();
}

void GraphView::followSelection() {
  const int64_t sel = doc_ ? doc_->selected() : -1;
  // Hidden in a group or a run, or in another computation: open exactly what holds it and centre
  // it (search, the instruction table and the "why" links all select through the document).
  if (sel >= 0 && tree_) reveal(sel);
  updateSelection();
}

void GraphView::updateSelection() {
  if (!doc_) return;
  const int64_t sel = doc_->selected();
  std::string sel_key;
  if (shown_ && sel >= 0 && tree_ && tree_->positionOf(sel) >= 0) sel_key = shown_->keyFor(sel);
  for (auto& [key, item] : nodes_) item->setSelectedNode(!sel_key.empty() && key == sel_key);
  for (GraphEdgeItem* e : edges_) {
    e->setEmphasis(!sel_key.empty() && (e->tail() == sel_key || e->head() == sel_key), palette());
  }
}

GraphNodeItem* GraphView::nodeForKey(const std::string& key) const {
  auto it = nodes_.find(key);
  return it == nodes_.end() ? nullptr : it->second;
}

GraphNodeItem* GraphView::nodeForInstruction(int64_t id) const { return nodeForKey(InstructionKey(id)); }

GraphClusterItem* GraphView::clusterForScope(int scope) const {
  auto it = clusters_.find(scope);
  return it == clusters_.end() ? nullptr : it->second;
}

QList<GraphNodeItem*> GraphView::nodes() const {
  QList<GraphNodeItem*> out;
  for (const auto& [key, item] : nodes_) out << item;
  return out;
}

QList<GraphClusterItem*> GraphView::clusters() const {
  QList<GraphClusterItem*> out;
  for (const auto& [scope, item] : clusters_) out << item;
  return out;
}

void GraphView::expandScope(int scope) {
  if (!tree_ || scope < 0 || scope >= static_cast<int>(tree_->scopes().size())) return;
  if (!state_.expanded.insert(scope).second) return;
  anchorOn(GroupKey(scope));
  if (!anchor_key_.empty()) anchor_key_ = ClusterKey(scope);  // the group becomes its frame
  requestLayout();
}

void GraphView::collapseScope(int scope) {
  if (!tree_ || scope <= 0) return;
  // Collapsing a group collapses what is inside it too.
  bool changed = false;
  for (auto it = state_.expanded.begin(); it != state_.expanded.end();) {
    if (*it != 0 && tree_->contains(scope, *it)) {
      it = state_.expanded.erase(it);
      changed = true;
    } else {
      ++it;
    }
  }
  if (!changed) return;
  anchorOn(ClusterKey(scope));
  if (!anchor_key_.empty()) anchor_key_ = GroupKey(scope);
  requestLayout();
}

void GraphView::expandAll() {
  if (!tree_) return;
  ViewState all = state_;
  all.expanded = tree_->allExpanded();
  for (size_t r = 0; r < tree_->runs().size(); ++r) all.unfolded.insert(static_cast<int>(r));
  if (all.expanded == state_.expanded && all.unfolded == state_.unfolded) return;
  state_ = std::move(all);
  fit_after_layout_ = true;
  requestLayout();
}

void GraphView::requestExpandAll() {
  if (!tree_) return;
  const int64_t n = tree_->scope(0).total;
  if (n <= kExpandAllWarnAt) {
    expandAll();
    return;
  }
  ExpandAllChoice choice = ExpandAllChoice::kCancel;
  if (requestExpandAllChoice) {
    choice = requestExpandAllChoice(n);
  } else {
    QMessageBox box(QMessageBox::Question, "Expand all",
                    QString("Expand all %L1 instructions?").arg(n),
                    QMessageBox::Cancel, this);
    box.setInformativeText("Every group is laid out at once: on a graph this large that takes a while and a "
                           "crowded view. Expanding one level opens the groups inside those open now, lazily.");
    QPushButton* all = box.addButton("Expand all", QMessageBox::AcceptRole);
    QPushButton* one = box.addButton("Expand one level", QMessageBox::ActionRole);
    box.setDefaultButton(one);
    box.exec();
    choice = box.clickedButton() == all ? ExpandAllChoice::kAll
             : box.clickedButton() == one ? ExpandAllChoice::kOneLevel
                                          : ExpandAllChoice::kCancel;
  }
  if (choice == ExpandAllChoice::kAll) expandAll();
  else if (choice == ExpandAllChoice::kOneLevel) expandOneLevel();
}

void GraphView::expandOneLevel() {
  if (!tree_) return;
  ViewState next = state_;
  for (int open : state_.expanded)
    for (int child : tree_->scope(open).children)
      if (!tree_->scope(child).children.empty()) next.expanded.insert(child);
  if (next.expanded == state_.expanded) return;
  state_ = std::move(next);
  requestLayout();
}

void GraphView::collapseAll() {
  if (!tree_) return;
  if (state_.expanded == std::set<int>{0} && state_.unfolded.empty()) return;
  state_.expanded = {0};
  state_.unfolded.clear();
  fit_after_layout_ = true;
  requestLayout();
}

void GraphView::setFoldRepeats(bool on) {
  if (state_.fold_repeats == on) return;
  state_.fold_repeats = on;
  state_.unfolded.clear();
  fit_after_layout_ = true;
  requestLayout();
}

void GraphView::unfoldRun(int run) {
  if (!tree_ || !state_.folded(run)) return;
  state_.unfolded.insert(run);
  anchorOn(FoldKey(run));
  if (!anchor_key_.empty()) anchor_key_ = GroupKey(tree_->runs()[static_cast<size_t>(run)].members.front());
  requestLayout();
}

void GraphView::foldRun(int run) {
  if (!tree_ || run < 0 || run >= static_cast<int>(tree_->runs().size()) || state_.folded(run)) return;
  const RepeatRun& r = tree_->runs()[static_cast<size_t>(run)];
  std::string anchor = ClusterKey(r.members.front());
  if (!clusterForScope(r.members.front())) anchor = GroupKey(r.members.front());
  state_.fold_repeats = true;
  state_.unfolded.erase(run);
  for (int m : r.members) collapseScope(m);  // re-expanding a member later starts collapsed
  anchorOn(anchor);
  if (!anchor_key_.empty()) anchor_key_ = FoldKey(run);
  requestLayout();
}

void GraphView::reveal(int64_t id) {
  if (!tree_ || !doc_) return;
  const Instruction* inst = doc_->instruction(id);
  if (!inst) return;
  if (tree_->positionOf(id) < 0 && inst->parent() && inst->parent() != currentComputation()) {
    setComputation(Q(inst->parent()->name()));
    if (!tree_) return;
  }
  if (tree_->positionOf(id) < 0) return;
  // Exactly the groups holding it, and the runs they belong to.
  bool changed = false;
  for (int s = tree_->scopeOf(id); s > 0; s = tree_->scope(s).parent) {
    changed |= state_.expanded.insert(s).second;
    const int run = tree_->scope(s).run;
    if (state_.folded(run)) changed |= state_.unfolded.insert(run).second;
  }
  if (!changed && !layout_pending_) {
    if (GraphNodeItem* n = nodeForInstruction(id)) {
      const QRectF visible = mapToScene(viewport()->rect()).boundingRect();
      if (!visible.contains(n->sceneBoundingRect()) || transform().m11() < kReadableScale) showReadable(n);
      return;
    }
  }
  center_after_layout_ = id;
  if (changed) requestLayout();
}

QList<int64_t> GraphView::setSearch(const QString& text) {
  QList<int64_t> found;
  matches_.clear();
  const std::string needle = text.trimmed().toLower().toStdString();
  if (!needle.empty() && tree_ && doc_) {
    const auto& order = tree_->instructions();
    for (int32_t position : searchIndex().Find(needle)) {
      found << order[static_cast<size_t>(position)]->id();
      matches_.insert(order[static_cast<size_t>(position)]->id());
    }
  }
  highlightMatches();
  return found;
}

const GraphSearchIndex& GraphView::searchIndex() {
  if (!searchIndexCurrent()) {
    // Not built yet (a small graph, or the background build has not finished): build it here.
    const DocumentModel* doc = doc_;
    search_index_ = GraphSearchIndex::Build(
        tree_, [doc](int64_t id) { return doc->findSharding(id); }, doc_->mesh(), search_index_.get());
    search_index_generation_ = search_generation_;
  }
  return *search_index_;
}

void GraphView::invalidateSearchIndex() {
  ++search_generation_;
  const QString key = QString("search-index:%1").arg(reinterpret_cast<quintptr>(this));
  if (!tree_ || !doc_ || tree_->instructions().size() < kSearchIndexInBackgroundAt) {
    jobTracker()->cancelKey(key);
    return;
  }
  // A snapshot of the shardings for the worker: the annotations (few) copied, the propagated
  // shardings shared (the document replaces them, never changes them).
  struct Shardings {
    std::map<int64_t, HloSharding> annotations;
    std::shared_ptr<const std::unordered_map<int64_t, HloSharding>> propagated;
  };
  auto shardings = std::make_shared<Shardings>(Shardings{doc_->annotations(), doc_->propagatedShardings()});
  const JobTracker::Spec spec{.label = "indexing the graph for search", .lane = Lane::kLayout, .key = key, .context = this};
  const quint64 generation = search_generation_;
  jobTracker()->run<std::shared_ptr<const GraphSearchIndex>>(
      spec,
      [tree = tree_, shardings, mesh = doc_->mesh(), previous = search_index_](const CancellationToken& token) {
        return GraphSearchIndex::Build(
            tree,
            [&shardings](int64_t id) -> const HloSharding* {
              if (auto a = shardings->annotations.find(id); a != shardings->annotations.end()) return &a->second;
              if (shardings->propagated) {
                if (auto p = shardings->propagated->find(id); p != shardings->propagated->end()) return &p->second;
              }
              return nullptr;
            },
            mesh, previous.get(), token);
      },
      [this, generation](std::shared_ptr<const GraphSearchIndex> index) {
        if (!index || generation != search_generation_ || index->tree() != tree_.get()) return;  // out of date
        search_index_ = std::move(index);
        search_index_generation_ = generation;
      });
}

void GraphView::highlightMatches() {
  std::set<std::string> hit_keys;
  if (shown_) {
    for (int64_t id : matches_) hit_keys.insert(shown_->keyFor(id));
  }
  for (auto& [key, item] : nodes_) item->setMatch(hit_keys.count(key) > 0);
}

void GraphView::scaleBy(double factor) {
  const double current = transform().m11();
  const double target = std::clamp(current * factor, 0.03, 4.0);
  if (std::abs(target - current) < 1e-9) return;
  scale(target / current, target / current);
  minimap_->update();
  emit zoomChanged(target);
}

void GraphView::showReadable(GraphNodeItem* node) {
  // A match found at fit zoom on a large graph would be a speck: zoom to 100% first.
  if (transform().m11() < kReadableScale) scaleBy(1.0 / transform().m11());
  centerOn(node);
}

void GraphView::zoomIn() { scaleBy(1.25); }
void GraphView::zoomOut() { scaleBy(1 / 1.25); }

void GraphView::resetZoom() {
  resetTransform();
  minimap_->update();
  emit zoomChanged(1.0);
}

void GraphView::fitAll() {
  if (scene_->items().isEmpty()) return;
  fitInView(scene_->sceneRect(), Qt::KeepAspectRatio);
  if (transform().m11() > 1.0) {  // small graphs: don't blow them up
    resetTransform();
    centerOn(scene_->sceneRect().center());
  }
  minimap_->update();
  emit zoomChanged(transform().m11());
}

void GraphView::fitReadable() {
  if (scene_->items().isEmpty()) return;
  const QRectF sr = scene_->sceneRect();
  const QRectF vp = viewport()->rect();
  const double whole = std::min(vp.width() / sr.width(), vp.height() / sr.height());
  if (whole >= 0.6) {  // the whole graph is readable at once
    fitAll();
    return;
  }
  // A large graph: fit its width (within readable bounds) and start at the top, where the inputs
  // are, centred on the nodes there (not on empty space between far-apart columns).
  const double s = std::clamp(vp.width() / sr.width(), 0.6, 1.0);
  resetTransform();
  scale(s, s);
  const double band = vp.height() / s;
  double top = sr.bottom();
  for (const auto& [key, item] : nodes_) top = std::min(top, item->sceneBoundingRect().top());
  std::vector<double> xs;
  for (const auto& [key, item] : nodes_) {
    const QRectF r = item->sceneBoundingRect();
    if (r.top() < top + band * 0.8) xs.push_back(r.center().x());
  }
  double cx = sr.center().x();
  if (!xs.empty()) {
    std::nth_element(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(xs.size() / 2), xs.end());
    cx = xs[xs.size() / 2];
  }
  centerOn(cx, std::max(sr.top(), top - 20) + band / 2);
  minimap_->update();
  emit zoomChanged(s);
}

void GraphView::wheelEvent(QWheelEvent* event) {
  const double steps = event->angleDelta().y() / 120.0;
  if (steps == 0) {
    QGraphicsView::wheelEvent(event);
    return;
  }
  scaleBy(std::pow(1.15, steps));
  event->accept();
}

void GraphView::updateMiniMapVisibility() {
  // Only when there is something to navigate and room to spare.
  const QRect vp = viewport()->geometry();
  const bool room = vp.width() > 2.6 * minimap_->width() && vp.height() > 2.6 * minimap_->height();
  minimap_->setVisible(nodes_.size() > 1 && room);
  minimap_->move(vp.right() - minimap_->width() - 8, vp.bottom() - minimap_->height() - 8);
}

void GraphView::resizeEvent(QResizeEvent* event) {
  QGraphicsView::resizeEvent(event);
  updateMiniMapVisibility();
}

void GraphView::scrollContentsBy(int dx, int dy) {
  QGraphicsView::scrollContentsBy(dx, dy);
  minimap_->update();
}

void GraphView::mousePressEvent(QMouseEvent* event) {
  if (event->button() == Qt::LeftButton && !itemAt(event->pos()) && doc_) doc_->select(-1);
  QGraphicsView::mousePressEvent(event);
}

void GraphView::changeEvent(QEvent* event) {
  QGraphicsView::changeEvent(event);
  if (event->type() == QEvent::PaletteChange || event->type() == QEvent::ApplicationPaletteChange) {
    recolour();
    for (GraphEdgeItem* e : edges_) e->setEmphasis(false, palette());
    updateSelection();
  }
}

void GraphView::drawBackground(QPainter* painter, const QRectF& rect) {
  painter->fillRect(rect, palette().color(QPalette::Base));
}

// ---- GraphPane ---------------------------------------------------------------------------------------

GraphPane::GraphPane(QWidget* parent) : QWidget(parent), view_(new GraphView(this)) {
  setObjectName("graphPane");
  auto* bar = new QHBoxLayout;
  bar->setContentsMargins(6, 4, 6, 4);
  bar->setSpacing(6);
  bar->addWidget(new QLabel("Computation:"));
  computations_ = new QComboBox;
  computations_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  computations_->setToolTip("The computation shown in the graph");
  bar->addWidget(computations_);
  bar->addSpacing(12);
  search_ = new QLineEdit;
  search_->setObjectName("graphSearch");
  search_->setPlaceholderText("Find name, opcode or sharding (Ctrl+F)");
  search_->setClearButtonEnabled(true);
  search_->setMinimumWidth(140);
  bar->addWidget(search_, 1);
  auto* prev = new QToolButton;
  prev->setText(QString::fromUtf8("\u25B2"));
  prev->setToolTip("Previous match (Shift+F3)");
  auto* next = new QToolButton;
  next->setText(QString::fromUtf8("\u25BC"));
  next->setToolTip("Next match (F3, Enter)");
  bar->addWidget(prev);
  bar->addWidget(next);
  match_label_ = new QLabel;
  match_label_->setMinimumWidth(90);
  bar->addWidget(match_label_);
  // The buttons: beside the search row when the pane is wide enough, else below it.
  auto* buttons = new QHBoxLayout;
  buttons->setContentsMargins(6, 0, 6, 0);
  buttons->setSpacing(6);
  buttons->addStretch();
  auto add_button = [&](const QString& text, const QString& tip, auto slot) {
    auto* b = new QToolButton;
    b->setText(text);
    b->setToolTip(tip);
    b->setAutoRaise(true);
    connect(b, &QToolButton::clicked, view_, slot);
    buttons->addWidget(b);
  };
  add_button("Expand all", "Expand every group (large graphs: asks first, and offers one level)", &GraphView::requestExpandAll);
  add_button("Collapse all", "Collapse every group", &GraphView::collapseAll);
  fold_ = new QToolButton;
  fold_->setObjectName("foldRepeats");
  fold_->setText(QString::fromUtf8("Fold repeats"));
  fold_->setToolTip("Show identical sibling groups (the layers of a stack) as one node \u00D7 N");
  fold_->setCheckable(true);
  fold_->setChecked(true);
  fold_->setAutoRaise(true);
  connect(fold_, &QToolButton::toggled, view_, &GraphView::setFoldRepeats);
  buttons->addWidget(fold_);
  add_button("Fit", "Fit the graph in the view (Ctrl+0)", &GraphView::fitAll);
  add_button("\u2212", "Zoom out (Ctrl+-)", &GraphView::zoomOut);
  add_button("+", "Zoom in (Ctrl++)", &GraphView::zoomIn);
  zoom_label_ = new QLabel("100%");
  zoom_label_->setMinimumWidth(44);
  buttons->addWidget(zoom_label_);

  // The toolbar never dictates the pane's minimum width (the pane may sit in a narrow dock).
  auto* bar_widget = new QWidget;
  bars_ = new QBoxLayout(QBoxLayout::LeftToRight);
  bars_->setContentsMargins(0, 0, 0, 0);
  bars_->setSpacing(0);
  bars_->addLayout(bar, 1);
  bars_->addLayout(buttons);
  search_row_ = bar;
  buttons_row_ = buttons;
  bar_widget->setLayout(bars_);
  bar_widget->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Fixed);
  bar_widget->setMinimumWidth(0);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(0);
  layout->addWidget(bar_widget);
  layout->addWidget(view_, 1);

  connect(search_, &QLineEdit::textChanged, this, &GraphPane::onSearchTextChanged);
  connect(search_, &QLineEdit::returnPressed, this, &GraphPane::findNext);
  connect(next, &QToolButton::clicked, this, &GraphPane::findNext);
  connect(prev, &QToolButton::clicked, this, &GraphPane::findPrevious);
  connect(view_, &GraphView::zoomChanged, this,
          [this](double s) { zoom_label_->setText(QString("%1%").arg(std::round(s * 100))); });
  connect(computations_, &QComboBox::currentTextChanged, this, [this](const QString& name) {
    if (!name.isEmpty()) view_->setComputation(name);
  });
}

void GraphPane::setJobTracker(JobTracker* jobs) { view_->setJobTracker(jobs); }

bool GraphPane::toolbarStacked() const { return bars_ && bars_->direction() == QBoxLayout::TopToBottom; }

void GraphPane::arrangeToolbar() {
  if (!bars_) return;
  // One row needs the search row at its smallest useful width (the search field at its minimum)
  // beside every button; below that the buttons go under the search row, so nothing overlaps.
  const int one_row = search_row_->minimumSize().width() + buttons_row_->sizeHint().width() + 40;
  const auto direction = width() < one_row ? QBoxLayout::TopToBottom : QBoxLayout::LeftToRight;
  if (bars_->direction() != direction) bars_->setDirection(direction);
}

void GraphPane::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  arrangeToolbar();
}

void GraphPane::setDocument(DocumentModel* doc) {
  doc_ = doc;
  view_->setDocument(doc);
  connect(doc, &DocumentModel::moduleReset, this, &GraphPane::refreshComputations);
  refreshComputations();
}

void GraphPane::refreshComputations() {
  QSignalBlocker block(computations_);
  computations_->clear();
  if (!doc_ || !doc_->module()) return;
  const Module* m = doc_->module();
  if (m->entry()) computations_->addItem(Q(m->entry()->name()));
  for (const auto& c : m->computations()) {
    if (c.get() != m->entry()) computations_->addItem(Q(c->name()));
  }
  computations_->setCurrentIndex(0);
  computations_->setEnabled(computations_->count() > 1);
  search_->clear();
}

void GraphPane::focusSearch() {
  search_->setFocus(Qt::ShortcutFocusReason);
  search_->selectAll();
}

void GraphPane::onSearchTextChanged(const QString& text) {
  matches_ = view_->setSearch(text);
  match_index_ = -1;
  if (text.trimmed().isEmpty()) {
    match_label_->clear();
  } else {
    match_label_->setText(matches_.isEmpty() ? QString("no match") : QString("%1 match%2").arg(matches_.size()).arg(matches_.size() == 1 ? "" : "es"));
  }
}

void GraphPane::jumpTo(int index) {
  if (matches_.isEmpty()) return;
  match_index_ = (index % matches_.size() + matches_.size()) % matches_.size();
  const int64_t id = matches_[match_index_];
  match_label_->setText(QString("%1 of %2").arg(match_index_ + 1).arg(matches_.size()));
  if (doc_) doc_->select(id);
  view_->reveal(id);
}

void GraphPane::findNext() { jumpTo(match_index_ + 1); }
void GraphPane::findPrevious() { jumpTo(match_index_ < 0 ? -1 : match_index_ - 1); }

}  // namespace shardscope::views
