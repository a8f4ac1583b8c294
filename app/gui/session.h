// One open document and everything that works on it: the views' models (DocumentModel,
// AnalysisModel, RunHistory), the job tracker every background job goes through, the analysis jobs
// (propagation, partitioning, simulation), the run store's jobs and the project file. The main
// window shows one session; tests drive one without a window.
#pragma once

#include <QByteArray>
#include <QObject>
#include <QString>

#include "core/base/status.h"
#include "core/sharding/mesh.h"

namespace shardscope {
class Module;
}

namespace shardscope::views {
class AnalysisModel;
class DocumentModel;
class JobTracker;
class RunHistory;
}  // namespace shardscope::views

namespace shardscope {
struct Project;  // core/project/project_file.h
}

namespace shardscope::gui {

class AnalysisJobs;
class RunStoreJobs;

class Session : public QObject {
  Q_OBJECT

 public:
  explicit Session(QObject* parent = nullptr);
  // Cancels every job and waits for the workers (no job outlives the session).
  ~Session() override;

  views::DocumentModel* document() const { return doc_; }
  views::AnalysisModel* analysis() const { return analysis_; }
  views::RunHistory* runs() const { return runs_; }
  views::JobTracker* jobs() const { return jobs_; }
  AnalysisJobs* analysisJobs() const { return analysis_jobs_; }
  RunStoreJobs* store() const { return store_; }

  // ---- Loading (each clears the undo history; on an error the document stays as it was) ----
  Status loadExample(const QString& name);
  // A published configuration of `shardscope-cli reproduce` (app/pipeline/reproduce.h): the case's
  // column `column` built from the zoo at the paper's sizes, its mesh, and the slice it was
  // simulated on (devices per chip) as the document's slice override. `chip` (when not null) gets
  // the column's chip, for the simulation the caller asks for.
  Status loadPaperConfiguration(const QString& case_name, const QString& column, QString* chip = nullptr);
  Status loadHloText(const QString& text, const QString& filename);
  Status loadHloFile(const QString& path);
  Status loadProject(const QString& path);
  Status loadProjectJson(const QByteArray& json, const QString& where);
  // Opens an HLO file or a project off the GUI thread (read and parsed on the files' lane);
  // loadFinished reports the outcome. A newer request or cancelLoad() drops an older one.
  void requestLoadFile(const QString& path);
  void cancelLoad();
  bool loadBusy() const;
  // No module: every view shows its empty state (File ▸ Close).
  void close();

  // ---- Saving ----
  // Writes the project atomically; its run store is used from then on (with this session's runs).
  Status saveProject(const QString& path);
  QByteArray projectJson() const;

  // No job queued or running, nothing scheduled.
  bool idle() const;

 signals:
  // A requestLoadFile finished: ok, or the error ("FILE:LINE:COLUMN: error: ..." for parse errors).
  void loadFinished(const QString& path, bool ok, const QString& message);
  void idleChanged(bool idle);

 private:
  void adopt(Project project, const QString& path);

  views::JobTracker* jobs_;
  views::DocumentModel* doc_;
  views::AnalysisModel* analysis_;
  views::RunHistory* runs_;
  RunStoreJobs* store_;
  AnalysisJobs* analysis_jobs_;
  quint64 released_after_propagation_ = 0;  // the module generation whose first propagation freed memory
};

}  // namespace shardscope::gui
