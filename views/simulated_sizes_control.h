// The simulation panel's sizes control (the whole-model issue's "real sizes in the GUI"): the
// simulation may run the model at other sizes than the document's, while the document — its graph,
// its partitioned program and the numerical check's badge — stays the small instance. A button says
// which sizes the next simulation runs at ("Sizes: the document's" / "Sizes: batch=1024, ...") and
// opens a dialog: for a module the zoo built, each of the model's integer settings (those that set
// its mesh are shown but fixed: the document's mesh is the one simulated); for any module, "scale
// every dimension by k" (core/ir/scale_dims.h). The choice is part of the document
// (DocumentModel::simulatedSizes: undoable, saved with the project); a change asks for a new
// simulation.
#pragma once

#include <QPointer>
#include <QWidget>

class QDialog;
class QToolButton;

namespace shardscope::views {

class DocumentModel;

class SimulatedSizesControl : public QWidget {
  Q_OBJECT
 public:
  explicit SimulatedSizesControl(QWidget* parent = nullptr);
  void setDocument(DocumentModel* doc);

  QToolButton* button() const { return button_; }
  QToolButton* resetButton() const { return reset_; }
  // Opens the dialog (window-modal, not blocking) and returns it: its spin boxes are named
  // "size_<setting>" and "size_scale"; accepting it sets the document's simulated sizes.
  QDialog* openDialog();

 private:
  void loadFromDocument();

  QPointer<DocumentModel> doc_;
  QToolButton* button_;
  QToolButton* reset_;
};

}  // namespace shardscope::views
