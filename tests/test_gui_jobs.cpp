// The job tracker every background job of the GUI goes through: results come back by a queued call
// on the GUI thread; a newer job with the same key supersedes an older one (one still queued never
// runs, a running one's token is cancelled and its result dropped); cancel() runs the job's cancel
// callback at once and passes the cancellation into the job; lanes do not wait for each other (a
// long layout never delays a propagation); a job whose receiver is gone is dropped.
#include <atomic>
#include <thread>

#include <QSignalSpy>
#include <QThread>
#include <QtTest>

#include "views/job_tracker.h"

using namespace shardscope;
using namespace shardscope::views;

namespace {

// A flag a job waits on (the test opens it), so the test decides when a running job may end.
struct Gate {
  std::atomic<bool> open{false};
  std::atomic<bool> entered{false};
  // Until opened, or (`heed_token`) until the job is cancelled.
  void wait(const CancellationToken& token, bool heed_token = true) {
    entered = true;
    while (!open && !(heed_token && token.cancelled())) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
};

JobTracker::Spec Spec(const QString& label, JobTracker::Lane lane, const QString& key = QString(), bool cancellable = false) {
  JobTracker::Spec s;
  s.label = label;
  s.lane = lane;
  s.key = key;
  s.cancellable = cancellable;
  return s;
}

}  // namespace

class TestGuiJobs : public QObject {
  Q_OBJECT

 private slots:
  void resultsArriveOnTheGuiThread() {
    JobTracker jobs;
    QSignalSpy idle(&jobs, &JobTracker::idleChanged);
    Qt::HANDLE worker = nullptr;
    Qt::HANDLE delivered = nullptr;
    int result = 0;
    jobs.run<int>(
        Spec("adding", JobTracker::Lane::kEngine),
        [&worker](const CancellationToken&) {
          worker = QThread::currentThreadId();
          return 6 * 7;
        },
        [&](int r) {
          delivered = QThread::currentThreadId();
          result = r;
        });
    QVERIFY(!jobs.idle());
    QCOMPARE(jobs.labels(), QStringList{"adding"});
    QTRY_VERIFY(jobs.idle());
    QCOMPARE(result, 42);
    QCOMPARE(delivered, QThread::currentThreadId());
    QVERIFY(worker != QThread::currentThreadId());
    QCOMPARE(idle.count(), 2);  // busy, then idle
    QCOMPARE(jobs.workRun(), 1);
  }

  void aNewerJobSupersedesTheOlderOnes() {
    JobTracker jobs;
    Gate gate;
    std::atomic<int> ran{0};
    QList<int> results;
    int cancelled = 0;
    auto submit = [&](int value, bool wait) {
      return jobs.run<int>(
          Spec("working", JobTracker::Lane::kEngine, "work"),
          [&, value, wait](const CancellationToken& token) {
            ++ran;
            if (wait) gate.wait(token, /*heed_token=*/false);  // an engine that cannot stop mid-stage
            return value;
          },
          [&](int r) { results << r; }, [&] { ++cancelled; });
    };
    const auto first = submit(1, /*wait=*/true);
    QTRY_VERIFY(gate.entered);  // the first is running
    submit(2, false);           // queued behind it ...
    submit(3, false);           // ... and superseded by this one before it starts
    QVERIFY(!jobs.isActive(first));  // superseded: its token is cancelled, its result will be dropped
    QCOMPARE(jobs.jobs().size(), qsizetype{1});
    gate.open = true;
    QTRY_VERIFY(jobs.idle());
    QCOMPARE(results, QList<int>{3});  // only the newest result is shown
    QCOMPARE(ran.load(), 2);          // job 2 never ran
    QCOMPARE(cancelled, 0);           // superseded is not cancelled by the user
  }

  void cancelReachesTheJobAndAnswersAtOnce() {
    JobTracker jobs;
    Gate gate;
    std::atomic<bool> saw_cancel{false};
    bool done = false, cancelled = false;
    const auto id = jobs.run<int>(
        Spec("simulating", JobTracker::Lane::kEngine, "sim", /*cancellable=*/true),
        [&](const CancellationToken& token) {
          gate.wait(token);
          saw_cancel = token.cancelled();
          return 0;
        },
        [&](int) { done = true; }, [&] { cancelled = true; });
    QTRY_VERIFY(gate.entered);
    QVERIFY(jobs.hasCancellable());
    QVERIFY(jobs.cancelUserJobs());
    QVERIFY(cancelled);  // at once, before the worker has finished
    QVERIFY(!jobs.isActive(id));
    QVERIFY(jobs.idle());
    QTRY_VERIFY(saw_cancel.load());  // the token reached the job, which stopped
    QTest::qWait(20);
    QVERIFY(!done);  // its result is dropped
    QVERIFY(!jobs.cancelUserJobs());
  }

  // A long layout on its lane does not delay a propagation on the engine's lane.
  void lanesDoNotWaitForEachOther() {
    JobTracker jobs;
    Gate layout;
    bool propagated = false;
    jobs.run<int>(
        Spec("laying out", JobTracker::Lane::kLayout, "layout"),
        [&](const CancellationToken& token) {
          layout.wait(token);
          return 0;
        },
        [](int) {});
    QTRY_VERIFY(layout.entered);
    jobs.run<int>(
        Spec("propagating", JobTracker::Lane::kEngine), [](const CancellationToken&) { return 1; },
        [&](int) { propagated = true; });
    QTRY_VERIFY(propagated);
    QCOMPARE(jobs.labels(), QStringList{"laying out"});
    layout.open = true;
    QTRY_VERIFY(jobs.idle());
  }

  void aJobWhoseReceiverIsGoneIsDropped() {
    JobTracker jobs;
    bool done = false;
    auto* receiver = new QObject;
    Gate gate;
    JobTracker::Spec spec = Spec("loading", JobTracker::Lane::kFiles);
    spec.context = receiver;
    jobs.run<int>(
        spec,
        [&](const CancellationToken& token) {
          gate.wait(token);
          return 1;
        },
        [&](int) { done = true; });
    QTRY_VERIFY(gate.entered);
    delete receiver;
    gate.open = true;
    QTRY_VERIFY(jobs.idle());
    QVERIFY(!done);
  }

  // The tracker waits for its workers when it goes: no job outlives it; queued ones never start.
  void destructionWaitsForTheWorkers() {
    std::atomic<bool> started{false}, finished{false}, queued_ran{false};
    {
      JobTracker jobs;
      jobs.run<int>(
          Spec("saving", JobTracker::Lane::kStore),
          [&](const CancellationToken&) {
            started = true;
            std::this_thread::sleep_for(std::chrono::milliseconds(30));
            finished = true;
            return 0;
          },
          [](int) {});
      jobs.run<int>(
          Spec("saving", JobTracker::Lane::kStore),
          [&](const CancellationToken&) {
            queued_ran = true;
            return 0;
          },
          [](int) {});
      while (!started.load()) std::this_thread::yield();  // the first runs, the second waits
    }
    QVERIFY(finished.load());
    QVERIFY(!queued_ran.load());
  }
};

QTEST_MAIN(TestGuiJobs)
#include "test_gui_jobs.moc"
