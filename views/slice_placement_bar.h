// The simulation panel's slice row: one line saying how the logical mesh was placed on the
// physical slice of the run shown (Topology::DescribePlacement, the slice shape and its
// wraparound, as the run store keeps them), and a compact override of that placement — mesh
// placement (snake / row-major), wraparound (the generation's rule / every axis / none), an
// explicit torus shape and the devices per chip (the preset's, or a TPU v2/v3 chip's 1 or 2 cores
// as devices, as GSPMD's tables count them) — saved with the document (DocumentModel::sliceOverride, undoable). A
// change asks for a new simulation (the panel re-simulates); an override that cannot hold the mesh
// is reported on the line, in words, by the simulation that tried it.
#pragma once

#include <QPointer>
#include <QWidget>

class QComboBox;
class QLabel;
class QLineEdit;
class QToolButton;

namespace shardscope::sim {
struct RunResult;
}

namespace shardscope::views {

class DocumentModel;

class SlicePlacementBar : public QWidget {
  Q_OBJECT
 public:
  explicit SlicePlacementBar(QWidget* parent = nullptr);
  void setDocument(DocumentModel* doc);

  // The placement a run was simulated with (null: none shown yet).
  void showRun(const sim::RunResult* run);
  // A simulation failed: `message` says why (e.g. the torus shape does not hold the mesh).
  void showFailure(const QString& message);

  QLabel* placementLabel() const { return line_; }
  QComboBox* placementCombo() const { return placement_; }
  QComboBox* wraparoundCombo() const { return wraparound_; }
  QLineEdit* shapeEdit() const { return shape_; }
  QComboBox* coresCombo() const { return cores_; }

 private:
  void loadFromDocument();
  void applyControls();

  QPointer<DocumentModel> doc_;
  QLabel* line_;
  QComboBox* placement_;
  QComboBox* wraparound_;
  QLineEdit* shape_;
  QComboBox* cores_;
  QToolButton* reset_;
  bool loading_ = false;
};

}  // namespace shardscope::views
