#include "views/slice_placement_bar.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QToolButton>
#include <QVBoxLayout>

#include "simulator/run_result.h"
#include "simulator/topology.h"
#include "views/document_model.h"

namespace shardscope::views {

namespace {
QString Q(const std::string& s) { return QString::fromStdString(s); }
}  // namespace

SlicePlacementBar::SlicePlacementBar(QWidget* parent)
    : QWidget(parent),
      line_(new QLabel),
      placement_(new QComboBox),
      wraparound_(new QComboBox),
      shape_(new QLineEdit),
      cores_(new QComboBox),
      reset_(new QToolButton) {
  setObjectName("slicePlacementBar");
  line_->setObjectName("slicePlacement");
  line_->setWordWrap(true);
  line_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  line_->setTextFormat(Qt::RichText);
  placement_->setObjectName("slicePlacementMode");
  placement_->addItem("snake", "snake");
  placement_->addItem("row-major", "row-major");
  placement_->setToolTip("How a mesh axis that spans several physical axes is laid out: snake (consecutive devices "
                         "are neighbours, a ring closes over the torus) or row-major (a device may jump to the next row); "
                         "a strategy search's candidate is laid in its order of the mesh axes (\"order Y,X\": "
                         "minor first), as the search ranked it");
  wraparound_->setObjectName("sliceWraparound");
  wraparound_->addItem("generation", QString());
  wraparound_->addItem("every axis", "all");
  wraparound_->addItem("none", "none");
  wraparound_->setToolTip("Wraparound links: the chip generation's rule (v2/v3: only a whole pod; v4/v5p: whole cubes; "
                          "v5e/v6e: axes of 16), on every axis (a torus), or none (an open mesh)");
  shape_->setObjectName("sliceShape");
  shape_->setPlaceholderText("auto");
  shape_->setClearButtonEnabled(true);
  shape_->setMinimumWidth(90);
  shape_->setMaximumWidth(120);
  shape_->setToolTip("The physical slice (torus) shape in chips, e.g. 8x16 or 4x4x4; empty: the slice the "
                     "generation gives this mesh. It must hold the mesh's devices.");
  cores_->setObjectName("sliceCoresPerChip");
  cores_->addItem("chip's", 0);
  cores_->addItem("1 per chip", 1);
  cores_->addItem("2 per chip", 2);
  cores_->setToolTip("Devices per chip: the chip preset's, or each of a TPU v2/v3 chip's cores as a device (2 per "
                     "chip, as GSPMD's tables count TPU v3 cores; each core has half the chip's FLOPS and HBM)");
  reset_->setObjectName("sliceReset");
  reset_->setText("Default");
  reset_->setToolTip("Back to the generation's slice for this mesh");

  // The line over the controls: the line takes the panel's width (one line at 1600 px, two at
  // 1024), and the row's narrowest width is the controls' alone.
  auto* controls = new QHBoxLayout;
  controls->setContentsMargins(0, 0, 0, 0);
  controls->addWidget(new QLabel("Override — placement:"));
  controls->addWidget(placement_);
  controls->addWidget(new QLabel("wraparound:"));
  controls->addWidget(wraparound_);
  controls->addWidget(new QLabel("torus:"));
  controls->addWidget(shape_);
  controls->addWidget(new QLabel("devices:"));
  controls->addWidget(cores_);
  controls->addWidget(reset_);
  controls->addStretch(1);
  auto* rows = new QVBoxLayout(this);
  rows->setContentsMargins(6, 0, 6, 0);
  rows->setSpacing(2);
  rows->addWidget(line_);
  rows->addLayout(controls);

  connect(placement_, &QComboBox::activated, this, [this] { applyControls(); });
  connect(wraparound_, &QComboBox::activated, this, [this] { applyControls(); });
  connect(shape_, &QLineEdit::editingFinished, this, [this] { applyControls(); });
  connect(cores_, &QComboBox::activated, this, [this] { applyControls(); });
  connect(reset_, &QToolButton::clicked, this, [this] {
    if (doc_) doc_->setSliceOverride({});
  });
  showRun(nullptr);
}

void SlicePlacementBar::setDocument(DocumentModel* doc) {
  if (doc_) doc_->disconnect(this);
  doc_ = doc;
  if (doc_) {
    connect(doc_, &DocumentModel::sliceOverrideChanged, this, &SlicePlacementBar::loadFromDocument);
    connect(doc_, &DocumentModel::moduleReset, this, &SlicePlacementBar::loadFromDocument);
  }
  loadFromDocument();
}

void SlicePlacementBar::loadFromDocument() {
  loading_ = true;
  const ProjectSliceOverride o = doc_ ? doc_->sliceOverride() : ProjectSliceOverride{};
  // A search candidate's mesh order is a third choice, offered while the override has one.
  while (placement_->count() > 2) placement_->removeItem(2);
  if (!o.mesh_order.empty()) {
    placement_->addItem("order " + Q(o.mesh_order), Q(o.mesh_order));
    placement_->setCurrentIndex(2);
  } else {
    placement_->setCurrentIndex(o.placement == "row-major" ? 1 : 0);
  }
  wraparound_->setCurrentIndex(!o.wraparound ? 0 : *o.wraparound ? 1 : 2);
  shape_->setText(Q(sim::SliceShapeString(o.shape)));
  shape_->setStyleSheet(QString());
  cores_->setCurrentIndex(o.cores_per_chip ? static_cast<int>(*o.cores_per_chip) : 0);
  reset_->setEnabled(!o.empty());
  setEnabled(doc_ && doc_->module());
  loading_ = false;
}

void SlicePlacementBar::applyControls() {
  if (loading_ || !doc_ || !doc_->module()) return;
  ProjectSliceOverride o;
  if (placement_->currentIndex() == 1) o.placement = "row-major";
  if (placement_->currentIndex() == 2) o.mesh_order = placement_->currentData().toString().toStdString();
  const QString wrap = wraparound_->currentData().toString();
  if (!wrap.isEmpty()) o.wraparound = wrap == "all";
  const QString text = shape_->text().trimmed();
  if (!text.isEmpty()) {
    auto shape = sim::ParseSliceShape(text.toStdString());
    if (!shape.ok()) {
      // Not a shape at all: said here, nothing is simulated and the saved override stays.
      shape_->setStyleSheet("color: #b00020");
      line_->setText(QString("<span style='color:#b00020'>Torus shape: %1</span>").arg(Q(shape.error().message).toHtmlEscaped()));
      return;
    }
    o.shape = *shape;
  }
  shape_->setStyleSheet(QString());
  if (const int cores = cores_->currentData().toInt(); cores > 0) o.cores_per_chip = cores;
  doc_->setSliceOverride(o);
}

void SlicePlacementBar::showRun(const sim::RunResult* run) {
  if (!run) {
    line_->setText("<b>Slice:</b> shown once a step is simulated (the generation's slice for the mesh unless "
                   "overridden on the right)");
    return;
  }
  const QString placement = run->inputs.placement.empty() ? QString("placement not recorded (a run stored before placements were)")
                                                          : Q(run->inputs.placement);
  // The slice's shape and wraparound ("4x4x1 torus (wraparound on axes: 0,1)"); the chip and link
  // counts that follow in Topology::Describe are in the tooltip.
  const std::string& topology = run->inputs.topology_options;
  size_t cut = topology.find("), ");
  cut = cut != std::string::npos ? cut + 1 : topology.find(", ");
  const QString slice = Q(cut == std::string::npos ? topology : topology.substr(0, cut));
  line_->setText(QString("<b>Slice:</b> %1 &middot; %2").arg(placement.toHtmlEscaped(), slice.toHtmlEscaped()));
  line_->setToolTip(QString("How the mesh %1 was placed on the physical slice of this run:\n%2\n%3")
                        .arg(Q(run->inputs.mesh_text), placement, Q(topology)));
}

void SlicePlacementBar::showFailure(const QString& message) {
  line_->setText(QString("<span style='color:#b00020'><b>Slice:</b> %1</span>").arg(message.toHtmlEscaped()));
}

}  // namespace shardscope::views
