#include "views/simulated_sizes_control.h"

#include <charconv>
#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <optional>
#include <string>

#include <QDialog>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QSpinBox>
#include <QToolButton>
#include <QVBoxLayout>

#include "core/ir/scale_dims.h"
#include "core/zoo/zoo.h"
#include "views/document_model.h"

namespace shardscope::views {

namespace {

QString Q(const std::string& s) { return QString::fromStdString(s); }

std::optional<int64_t> IntOf(const std::string& text) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  return v;
}

}  // namespace

SimulatedSizesControl::SimulatedSizesControl(QWidget* parent)
    : QWidget(parent), button_(new QToolButton), reset_(new QToolButton) {
  setObjectName("simulatedSizes");
  button_->setObjectName("simulatedSizesButton");
  reset_->setObjectName("simulatedSizesReset");
  reset_->setText("Document's");
  reset_->setToolTip("Simulate at the document's own sizes again");
  auto* row = new QHBoxLayout(this);
  row->setContentsMargins(0, 0, 0, 0);
  row->setSpacing(2);
  row->addWidget(button_);
  row->addWidget(reset_);
  connect(button_, &QToolButton::clicked, this, [this] { openDialog(); });
  connect(reset_, &QToolButton::clicked, this, [this] {
    if (doc_) doc_->setSimulatedSizes({});
  });
  loadFromDocument();
}

void SimulatedSizesControl::setDocument(DocumentModel* doc) {
  if (doc_) doc_->disconnect(this);
  doc_ = doc;
  if (doc_) {
    connect(doc_, &DocumentModel::simulatedSizesChanged, this, &SimulatedSizesControl::loadFromDocument);
    connect(doc_, &DocumentModel::moduleReset, this, &SimulatedSizesControl::loadFromDocument);
  }
  loadFromDocument();
}

void SimulatedSizesControl::loadFromDocument() {
  const ProjectSimulatedSizes s = doc_ ? doc_->simulatedSizes() : ProjectSimulatedSizes{};
  const QString text = Q(s.Describe());
  const QString shown = text.size() > 36 ? text.left(33) + "..." : text;
  button_->setText(text.isEmpty() ? QString("Sizes: the document's") : "Sizes: " + shown);
  button_->setStyleSheet(text.isEmpty() ? QString() : QString("font-weight: bold"));
  button_->setToolTip(
      (text.isEmpty() ? QString("The simulation runs the document at its own sizes.")
                      : QString("The simulation runs the model at %1.").arg(text.toHtmlEscaped())) +
      "\nClick to simulate at other sizes: a zoo model's settings (the paper's batch, widths and layers), or "
      "every dimension of any module scaled by k. The document — its graph, partitioned program and the numerical "
      "check's badge — stays at its own sizes: the sharding is proven small and simulated at real size.");
  reset_->setVisible(!text.isEmpty());
  setEnabled(doc_ && doc_->module());
}

QDialog* SimulatedSizesControl::openDialog() {
  if (!doc_ || !doc_->module()) return nullptr;
  auto* dialog = new QDialog(window());
  dialog->setObjectName("simulatedSizesDialog");
  dialog->setWindowTitle("Simulated sizes");
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  auto* col = new QVBoxLayout(dialog);
  auto* intro = new QLabel(
      "The simulation runs the model at these sizes; the document (its graph, partitioned program and the "
      "numerical check) keeps its own.");
  intro->setWordWrap(true);
  col->addWidget(intro);
  auto* form = new QFormLayout;
  col->addLayout(form);

  const ProjectSimulatedSizes current = doc_->simulatedSizes();
  std::map<std::string, QSpinBox*> settings;  // the zoo settings offered, by name
  std::map<std::string, int64_t> built_values;
  const auto& built_with = doc_->zooSettings();
  const std::string model = doc_->source().toStdString();
  const ZooModel* entry = nullptr;
  static const std::vector<ZooModel> models = ZooList();
  if (built_with)
    for (const ZooModel& m : models)
      if (m.name == model) entry = &m;
  if (entry) {
    auto mesh = ZooMesh(model, *built_with);
    for (const ZooParameter& p : entry->parameters) {
      auto it = built_with->find(p.name);
      const std::string built = it != built_with->end() ? it->second : p.default_value;
      const auto value = IntOf(built);
      // Not a size: a dtype, an annotation set, an optimizer, a switch ("(0 | 1)" in the zoo's words).
      if (!value || *value < 0 || p.description.find("(0 | 1)") != std::string::npos) continue;
      // A setting that changes the model's mesh is fixed: the document's mesh is the one simulated.
      ZooOverrides probe = *built_with;
      probe[p.name] = std::to_string(*value > 0 ? 2 * *value : 1);
      auto probe_mesh = ZooMesh(model, probe);
      const bool sets_mesh = mesh.ok() && probe_mesh.ok() && !(probe_mesh.value() == mesh.value());
      auto* spin = new QSpinBox;
      spin->setObjectName(Q("size_" + p.name));
      spin->setRange(0, 1 << 30);
      auto over = current.zoo_settings.find(p.name);
      const auto shown = over != current.zoo_settings.end() ? IntOf(over->second) : value;
      spin->setValue(static_cast<int>(shown.value_or(*value)));
      spin->setEnabled(!sets_mesh);
      spin->setToolTip(Q(p.description) + (sets_mesh ? "\n(sets the mesh: change the mesh on the document)" : "") +
                       QString("\nThe document: %1").arg(*value));
      form->addRow(Q(p.name) + (spin->value() != *value ? " *" : ""), spin);
      settings[p.name] = spin;
      built_values[p.name] = *value;
    }
  }
  // A module the zoo did not build: its own dimensions, class by class (the entry parameters'
  // dimensions that must stay equal, core/ir/scale_dims.h), each with a factor.
  std::vector<std::pair<QSpinBox*, std::vector<std::string>>> factors;  // a row's spin box, its classes' first dimensions
  if (!entry) {
    auto classes = EntryParameterDimensionClasses(*doc_->module());
    // Classes that differ only by a layer's number ("layer0_wi:1", "layer1_wi:1") are one row:
    // the same dimension of every layer.
    struct Row {
      int64_t size = 0;
      QStringList names;               // every dimension of every class of the row
      std::vector<std::string> firsts;  // each class's first dimension (the key of its factor)
      int64_t value = 1;
    };
    std::vector<Row> rows;
    std::map<std::string, size_t> row_of;
    if (classes.ok()) {
      for (const DimensionClass& c : *classes) {
        if (c.fixed || c.size < 2 || c.dims.empty()) continue;
        std::set<std::string> patterns;
        for (const std::string& d : c.dims) {
          const size_t colon = d.rfind(':');
          std::string name;
          for (size_t k = 0; k < colon; ++k) {
            if (std::isdigit(static_cast<unsigned char>(d[k]))) {
              if (name.empty() || name.back() != '#') name += '#';
            } else {
              name += d[k];
            }
          }
          patterns.insert(name + d.substr(colon));
        }
        std::string key = std::to_string(c.size);
        for (const std::string& p : patterns) key += "|" + p;
        auto [it, fresh] = row_of.emplace(key, rows.size());
        if (fresh) rows.push_back(Row{c.size, {}, {}, 1});
        Row& row = rows[it->second];
        row.firsts.push_back(c.dims.front());
        for (const std::string& d : c.dims) {
          row.names << Q(d);
          if (auto f = current.dimension_factors.find(d); f != current.dimension_factors.end()) row.value = f->second;
        }
      }
    }
    const size_t shown = std::min<size_t>(rows.size(), 16);
    for (size_t r = 0; r < shown; ++r) {
      const Row& row = rows[r];
      auto* spin = new QSpinBox;
      spin->setObjectName(Q("factor_" + row.firsts.front()));
      spin->setRange(1, 4096);
      spin->setPrefix("x");
      spin->setValue(static_cast<int>(row.value));
      spin->setToolTip(QString("Dimensions of length %1 that stay equal%2: %3")
                           .arg(row.size)
                           .arg(row.firsts.size() > 1 ? QString(" (%1 classes, one per layer)").arg(row.firsts.size()) : QString())
                           .arg(row.names.join(", ")));
      QString label = QString("%1: ").arg(row.size) + QStringList(row.names.mid(0, 3)).join(", ");
      if (row.names.size() > 3) label += QString(" and %1 more").arg(row.names.size() - 3);
      form->addRow(label, spin);
      factors.push_back({spin, row.firsts});
    }
    if (rows.size() > shown)
      form->addRow(new QLabel(QString("(%1 more dimensions: the factor below scales them)").arg(rows.size() - shown)));
  }
  auto* scale = new QSpinBox;
  scale->setObjectName("size_scale");
  scale->setRange(1, 4096);
  scale->setValue(static_cast<int>(current.scale));
  scale->setToolTip("Every dimension of the module's parameters at least 2 long, and what follows from them, times k "
                    "(a constant's data and a weight's window keep their size; dimensions two rules would size "
                    "differently keep theirs too)");
  form->addRow(entry ? "then scale every dimension by" : factors.empty() ? "Scale every dimension by" : "Every other dimension by", scale);

  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
  col->addWidget(buttons);
  connect(buttons, &QDialogButtonBox::rejected, dialog, &QDialog::reject);
  connect(buttons, &QDialogButtonBox::accepted, dialog, [this, dialog, settings, built_values, scale, factors] {
    ProjectSimulatedSizes s;
    for (const auto& [name, spin] : settings)
      if (spin->value() != built_values.at(name)) s.zoo_settings[name] = std::to_string(spin->value());
    for (const auto& [spin, dims] : factors)
      if (spin->value() != 1)
        for (const std::string& dim : dims) s.dimension_factors[dim] = spin->value();
    s.scale = scale->value();
    if (doc_) doc_->setSimulatedSizes(s);
    dialog->accept();
  });
  dialog->open();
  return dialog;
}

}  // namespace shardscope::views
