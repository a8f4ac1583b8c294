#include "core/base/units.h"
#include "views/graph_view.h"

#include <algorithm>
#include <cmath>

#include <QApplication>
#include <QComboBox>
#include <QElapsedTimer>
#include <QGraphicsScene>
#include <QGraphicsSceneMouseEvent>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPainter>
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
  c.setAlpha(120);
  return c;
}

}  // namespace

// ---- GraphNodeItem -----------------------------------------------------------------------------------

GraphNodeItem::GraphNodeItem(GraphView* view, std::string key, int64_t instruction_id, int scope, const QRectF& rect)
    : view_(view), key_(std::move(key)), id_(instruction_id), scope_(scope), rect_(rect) {
  setAcceptHoverEvents(true);
  setZValue(2);
  setCursor(Qt::PointingHandCursor);
}

QRectF GraphNodeItem::boundingRect() const { return rect_.adjusted(-5, -5, 5, 5); }

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
  if (look_.shape == Look::Shape::kGroup) {  // a stacked look for collapsed scopes
    painter->setPen(QPen(look_.fill.darker(150), 1));
    painter->setBrush(look_.fill.darker(108));
    painter->drawPath(outline(r.translated(4, 4)));
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
  if (isGroup()) {
    view_->expandScope(scope_);
    event->accept();
    return;
  }
  QGraphicsItem::mouseDoubleClickEvent(event);
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

GraphEdgeItem::GraphEdgeItem(const LayoutEdgePath& e) : tail_(e.tail), head_(e.head) {
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
  setZValue(1);
  setAcceptedMouseButtons(Qt::NoButton);
}

void GraphEdgeItem::setEmphasis(bool on, const QPalette& pal) {
  setPen(on ? QPen(pal.color(QPalette::Highlight), 2.2) : QPen(EdgeColor(pal), 1.2));
  setZValue(on ? 1.5 : 1);
}

QRectF GraphEdgeItem::boundingRect() const { return QGraphicsPathItem::boundingRect().united(arrow_.boundingRect()).adjusted(-2, -2, 2, 2); }

void GraphEdgeItem::paint(QPainter* painter, const QStyleOptionGraphicsItem*, QWidget*) {
  painter->setRenderHint(QPainter::Antialiasing, true);
  painter->setPen(pen());
  painter->setBrush(Qt::NoBrush);
  painter->drawPath(path());
  if (!arrow_.isEmpty()) {
    painter->setPen(Qt::NoPen);
    painter->setBrush(pen().color());
    painter->drawPolygon(arrow_);
  }
}

// ---- GraphClusterItem --------------------------------------------------------------------------------

GraphClusterItem::GraphClusterItem(GraphView* view, int scope, const QString& label, const QRectF& rect, int depth)
    : view_(view), scope_(scope), label_(label), rect_(rect), depth_(depth) {
  setZValue(0);
  setToolTip(QString("Name scope %1 — double-click to collapse").arg(label));
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
    cp.setRenderHint(QPainter::Antialiasing);
    view_->scene()->render(&cp, target, view_->scene()->sceneRect());
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
  connect(doc_, &DocumentModel::selectionChanged, this, [this](qint64) { updateSelection(); });
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
  const Computation* c = currentComputation();
  tree_ = c ? std::make_unique<ScopeTree>(ScopeTree::Build(*c)) : nullptr;
  expanded_ = tree_ ? tree_->defaultExpansion(120) : std::set<int>{};
  fit_after_layout_ = true;
  requestLayout();
}

void GraphView::onModuleReset() {
  computation_name_.clear();
  const Computation* c = currentComputation();
  tree_ = c ? std::make_unique<ScopeTree>(ScopeTree::Build(*c)) : nullptr;
  expanded_ = tree_ ? tree_->defaultExpansion(120) : std::set<int>{};
  matches_.clear();
  fit_after_layout_ = true;
  requestLayout();
}

std::pair<double, double> GraphView::nodeSize(int64_t id, int scope) const {
  const QFontMetricsF fm(NodeFont(font()));
  const QFontMetricsF bm(BoldFont(font()));
  double w = 0;
  int lines = 4;
  if (id >= 0) {
    const Instruction* inst = doc_->instruction(id);
    if (!inst) return {120, 4 * fm.height() + 10};
    w = std::max({bm.horizontalAdvance(Q(inst->opcode_text())), fm.horizontalAdvance(Q(inst->name())),
                  fm.horizontalAdvance(ShapeText(inst->shape()))});
    const int64_t rank = inst->shape().IsArray() ? inst->shape().rank() : 2;
    QStringList dims;
    for (int64_t d = 0; d < std::max<int64_t>(rank, 1); ++d) dims << "I_XY";
    w = std::max(w, fm.horizontalAdvance("[" + dims.join(", ") + "]"));
  } else {
    const ScopeNode& s = tree_->scope(scope);
    w = std::max(bm.horizontalAdvance(QString::fromUtf8("\u25B8 ") + Q(s.label)), fm.horizontalAdvance("0000 instructions"));
  }
  w = std::clamp(w + 22, 110.0, 300.0);
  return {std::round(w), std::round(lines * fm.height() + 10)};
}

void GraphView::requestLayout() {
  const Computation* comp = currentComputation();
  scene_->clear();
  nodes_.clear();
  edges_.clear();
  layout_.reset();
  if (!comp || !tree_) {
    visible_.reset();
    layout_pending_ = false;
    minimap_->hide();
    return;
  }
  auto visible = std::make_unique<VisibleGraph>(BuildVisibleGraph(
      *comp, *tree_, expanded_,
      [this](const std::string&, int64_t id, int scope) { return nodeSize(id, scope); }));
  const QString key = QString("%1/%2/%3/%4")
                          .arg(reinterpret_cast<quintptr>(doc_.data()))
                          .arg(doc_->moduleGeneration())
                          .arg(Q(visible->signature))
                          .arg(font().pointSizeF());
  const quint64 request = ++layout_request_;
  layout_pending_ = true;
  visible_ = std::move(visible);
  if (auto hit = LayoutCache::instance().cached(key)) {
    // Laid out before: shown as soon as the event loop comes round, without waiting for the lane.
    QTimer::singleShot(0, this, [this, request, hit] {
      if (request == layout_request_ && visible_) applyLayout(hit, *visible_);
    });
    return;
  }
  // The newest layout of this view wins: an older one still queued never runs.
  const JobTracker::Spec spec{.label = "laying out",
                              .lane = Lane::kLayout,
                              .key = QString("layout:%1").arg(reinterpret_cast<quintptr>(this)),
                              .context = this};
  jobTracker()->run<std::shared_ptr<const LayoutResult>>(
      spec,
      [key, input = visible_->input](const CancellationToken& token) { return LayoutCache::instance().layOut(key, input, token); },
      [this, request](std::shared_ptr<const LayoutResult> result) {
        if (request != layout_request_ || !visible_) return;  // superseded
        applyLayout(result, *visible_);
      });
}

void GraphView::applyLayout(std::shared_ptr<const LayoutResult> layout, const VisibleGraph& visible) {
  scene_->clear();
  nodes_.clear();
  edges_.clear();
  layout_ = std::move(layout);
  layout_pending_ = false;
  if (!layout_ || !layout_->ok) {
    scene_->addText(QString("Layout failed: %1").arg(layout_ ? Q(layout_->error) : QString("no result")));
    emit layoutFinished();
    return;
  }
  for (const auto& [key, box] : layout_->clusters) {
    auto it = visible.cluster_scope.find(key);
    if (it == visible.cluster_scope.end()) continue;
    const ScopeNode& s = tree_->scope(it->second);
    auto* item = new GraphClusterItem(this, it->second, Q(s.label), QRectF(box.x, box.y, box.w, box.h), s.depth);
    scene_->addItem(item);
  }
  for (const auto& e : layout_->edges) {
    auto* item = new GraphEdgeItem(e);
    item->setEmphasis(false, palette());
    scene_->addItem(item);
    edges_.push_back(item);
  }
  for (const auto& [key, box] : layout_->nodes) {
    auto inst_it = visible.node_instruction.find(key);
    const int64_t id = inst_it == visible.node_instruction.end() ? -1 : inst_it->second;
    auto group_it = visible.group_scope.find(key);
    const int scope = group_it == visible.group_scope.end() ? -1 : group_it->second;
    auto* item = new GraphNodeItem(this, key, id, scope, QRectF(box.x, box.y, box.w, box.h));
    scene_->addItem(item);
    nodes_[key] = item;
  }
  scene_->setSceneRect(QRectF(-20, -20, layout_->width + 40, layout_->height + 40));
  ++layouts_applied_;
  recolour();
  if (fit_after_layout_) {
    fit_after_layout_ = false;
    fitReadable();
  }
  updateSelection();
  if (center_after_layout_ >= 0) {
    if (GraphNodeItem* n = nodeForInstruction(center_after_layout_)) centerOn(n);
    center_after_layout_ = -1;
  }
  updateMiniMapVisibility();
  minimap_->invalidate();
  emit layoutFinished();
}

GraphNodeItem::Look GraphView::lookFor(const GraphNodeItem* item, QString* tooltip) const {
  GraphNodeItem::Look look;
  const QPalette pal = palette();
  const DeviceMesh& mesh = doc_->mesh();
  if (item->isGroup()) {
    const ScopeNode& s = tree_->scope(item->scope());
    const auto ids = tree_->instructionsUnder(item->scope());
    std::optional<HloSharding> common;
    bool uniform = true;
    int sharded = 0, user = 0;
    for (int64_t id : ids) {
      auto sh = doc_->sharding(id);
      if (sh) ++sharded;
      if (doc_->origin(id) == TensorOrigin::kUser) ++user;
      if (!sh) continue;
      if (!common) common = sh;
      else if (!(*common == *sh)) uniform = false;
    }
    look.shape = GraphNodeItem::Look::Shape::kGroup;
    look.lines = {QString::fromUtf8("\u25B8 ") + Q(s.label), QString("%1 instructions").arg(ids.size())};
    look.sharding_line = QString("%1 of %2 sharded").arg(sharded).arg(ids.size());
    look.sharded = sharded > 0;
    look.user = false;
    look.fill = (common && uniform) ? ShardingFillColor(*common, pal) : UnshardedFillColor(pal);
    if (tooltip) {
      *tooltip = QString("<b>%1</b><br>%2 instructions, %3 sharded, %4 annotated by you<br><i>Double-click to expand</i>")
                     .arg(Q(s.path).toHtmlEscaped())
                     .arg(ids.size())
                     .arg(sharded)
                     .arg(user);
    }
    return look;
  }
  const Instruction* inst = doc_->instruction(item->instructionId());
  if (!inst) return look;
  const auto sh = doc_->sharding(inst->id());
  const TensorOrigin origin = doc_->origin(inst->id());
  look.lines = {Q(inst->opcode_text()), Q(inst->name()), ShapeText(inst->shape())};
  look.user = origin == TensorOrigin::kUser;
  look.sharded = sh.has_value();
  look.fill = sh ? ShardingFillColor(*sh, pal) : UnshardedFillColor(pal);
  look.sharding_line = sh ? NamedAxesText(*sh, inst->shape(), mesh, "") : QString("unsharded");
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
  if (tooltip) {
    QString t = QString("<b>%1</b> = %2<br>shape %3").arg(Q(inst->name()).toHtmlEscaped(), Q(inst->opcode_text()),
                                                          ShapeText(inst->shape()).toHtmlEscaped());
    if (sh) {
      t += QString("<br><b>%1</b> &nbsp;(%2)")
               .arg(NamedAxesText(*sh, inst->shape(), mesh, Q(inst->name())).toHtmlEscaped(),
                    look.user ? "your annotation" : "inferred");
      t += QString("<br>HLO: <tt>%1</tt>").arg(HloShardingText(*sh).toHtmlEscaped());
      t += QString("<br>per device: %1 &middot; %2 (whole tensor %3)")
               .arg(LocalShapeText(inst->shape(), sh).toHtmlEscaped(), Q(FormatBytes(BytesPerDevice(inst->shape(), sh))),
                    Q(FormatBytes(inst->shape().ByteSize())));
    } else {
      t += "<br><i>no sharding yet</i>";
    }
    const std::string op_name = inst->op_name();
    if (!op_name.empty()) t += QString("<br><small>%1</small>").arg(Q(op_name).toHtmlEscaped());
    *tooltip = t;
  }
  return look;
}

void GraphView::recolour() {
  if (!doc_ || !doc_->module()) return;
  ++recolours_;
  for (auto& [key, item] : nodes_) {
    QString tip;
    item->setLook(lookFor(item, &tip));
    item->setToolTip(tip);
    item->setSharding(item->isGroup() ? std::nullopt : doc_->sharding(item->instructionId()));
  }
  minimap_->invalidate();
  viewport()->update();
}

void GraphView::updateSelection() {
  if (!doc_) return;
  const int64_t sel = doc_->selected();
  if (sel >= 0) {
    const Instruction* inst = doc_->instruction(sel);
    if (inst && inst->parent() && currentComputation() && inst->parent() != currentComputation()) {
      setComputation(Q(inst->parent()->name()));
      center_after_layout_ = sel;
      return;
    }
  }
  std::string sel_key;
  if (visible_ && sel >= 0) {
    auto it = visible_->representative.find(sel);
    if (it != visible_->representative.end()) sel_key = it->second;
  }
  for (auto& [key, item] : nodes_) item->setSelectedNode(!sel_key.empty() && key == sel_key);
  for (GraphEdgeItem* e : edges_) {
    e->setEmphasis(!sel_key.empty() && (e->tail() == sel_key || e->head() == sel_key), palette());
  }
  if (!sel_key.empty()) {
    if (GraphNodeItem* n = nodeForKey(sel_key)) {
      const QRectF visible = mapToScene(viewport()->rect()).boundingRect();
      if (!visible.contains(n->sceneBoundingRect())) centerOn(n);
    }
  }
}

GraphNodeItem* GraphView::nodeForKey(const std::string& key) const {
  auto it = nodes_.find(key);
  return it == nodes_.end() ? nullptr : it->second;
}

GraphNodeItem* GraphView::nodeForInstruction(int64_t id) const { return nodeForKey(InstructionKey(id)); }

QList<GraphNodeItem*> GraphView::nodes() const {
  QList<GraphNodeItem*> out;
  for (const auto& [key, item] : nodes_) out << item;
  return out;
}

void GraphView::expandScope(int scope) {
  if (!tree_) return;
  if (expanded_.insert(scope).second) requestLayout();
}

void GraphView::collapseScope(int scope) {
  if (!tree_ || scope <= 0) return;
  // Collapsing a scope collapses what is inside it too.
  bool changed = false;
  for (auto it = expanded_.begin(); it != expanded_.end();) {
    if (*it != 0 && tree_->contains(scope, *it)) {
      it = expanded_.erase(it);
      changed = true;
    } else {
      ++it;
    }
  }
  if (changed) requestLayout();
}

void GraphView::expandAll() {
  if (!tree_) return;
  auto all = tree_->allExpanded();
  if (all == expanded_) return;
  expanded_ = std::move(all);
  fit_after_layout_ = true;
  requestLayout();
}

void GraphView::collapseAll() {
  if (!tree_) return;
  std::set<int> root{0};
  if (root == expanded_) return;
  expanded_ = root;
  fit_after_layout_ = true;
  requestLayout();
}

void GraphView::reveal(int64_t id) {
  if (!tree_ || !doc_) return;
  const Instruction* inst = doc_->instruction(id);
  if (inst && inst->parent() && inst->parent() != currentComputation()) {
    setComputation(Q(inst->parent()->name()));
  }
  if (GraphNodeItem* n = nodeForInstruction(id)) {
    centerOn(n);
    return;
  }
  bool changed = false;
  for (int s = tree_->scopeOf(id); s > 0; s = tree_->scope(s).parent) changed |= expanded_.insert(s).second;
  center_after_layout_ = id;
  if (changed) requestLayout();
}

QList<int64_t> GraphView::setSearch(const QString& text) {
  QList<int64_t> found;
  matches_.clear();
  const QString needle = text.trimmed();
  const Computation* comp = currentComputation();
  if (!needle.isEmpty() && comp && doc_) {
    for (const auto& inst : comp->instructions()) {
      bool hit = Q(inst->name()).contains(needle, Qt::CaseInsensitive) ||
                 Q(inst->opcode_text()).contains(needle, Qt::CaseInsensitive);
      if (!hit) {
        if (auto sh = doc_->sharding(inst->id())) {
          hit = HloShardingText(*sh).contains(needle, Qt::CaseInsensitive) ||
                NamedAxesText(*sh, inst->shape(), doc_->mesh(), "").contains(needle, Qt::CaseInsensitive);
        }
      }
      if (hit) {
        found << inst->id();
        matches_.insert(inst->id());
      }
    }
  }
  std::set<std::string> hit_keys;
  if (visible_) {
    for (int64_t id : matches_) {
      auto it = visible_->representative.find(id);
      if (it != visible_->representative.end()) hit_keys.insert(it->second);
    }
  }
  for (auto& [key, item] : nodes_) item->setMatch(hit_keys.count(key) > 0);
  return found;
}

void GraphView::scaleBy(double factor) {
  const double current = transform().m11();
  const double target = std::clamp(current * factor, 0.03, 4.0);
  if (std::abs(target - current) < 1e-9) return;
  scale(target / current, target / current);
  minimap_->update();
  emit zoomChanged(target);
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
  bar->addStretch();
  auto add_button = [&](const QString& text, const QString& tip, auto slot) {
    auto* b = new QToolButton;
    b->setText(text);
    b->setToolTip(tip);
    b->setAutoRaise(true);
    connect(b, &QToolButton::clicked, view_, slot);
    bar->addWidget(b);
  };
  add_button("Expand all", "Expand every name scope", &GraphView::expandAll);
  add_button("Collapse all", "Collapse every name scope", &GraphView::collapseAll);
  add_button("Fit", "Fit the graph in the view (Ctrl+0)", &GraphView::fitAll);
  add_button("\u2212", "Zoom out (Ctrl+-)", &GraphView::zoomOut);
  add_button("+", "Zoom in (Ctrl++)", &GraphView::zoomIn);
  zoom_label_ = new QLabel("100%");
  zoom_label_->setMinimumWidth(44);
  bar->addWidget(zoom_label_);

  // The toolbar never dictates the pane's minimum width (the pane may sit in a narrow dock).
  auto* bar_widget = new QWidget;
  bar_widget->setLayout(bar);
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
  connect(view_, &GraphView::layoutFinished, this, [this] {
    if (!search_->text().isEmpty()) view_->setSearch(search_->text());
  });
  connect(computations_, &QComboBox::currentTextChanged, this, [this](const QString& name) {
    if (!name.isEmpty()) view_->setComputation(name);
  });
}

void GraphPane::setJobTracker(JobTracker* jobs) { view_->setJobTracker(jobs); }

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
