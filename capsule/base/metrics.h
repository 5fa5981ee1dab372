// Numbers a long-running program keeps about itself (counters, gauges, histograms, each with
// labels), printed in Prometheus's text exposition format, version 0.0.4, for a scraper
// (capsule/base/metrics_server.h serves it over HTTP):
//
//   # HELP capsule_sidecar_moves_started_total Moves offered and accepted.
//   # TYPE capsule_sidecar_moves_started_total counter
//   capsule_sidecar_moves_started_total 3
//   capsule_sidecar_refusals_total{call="offer",reason="failed_precondition"} 1
//
// A metric is made once (Add*), and the reference it returns is counted on from then on
// without any lock; Add* with a name and labels already made returns the same metric.
//
// Thread-safety: every method may be called from any thread. Counters and gauges are atomic;
// a histogram and the list of metrics each have one mutex. A metric lives as long as its
// registry.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace capsule {

// {name, value} pairs, in the order printed.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void Add(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

class Gauge {
 public:
  void Set(int64_t v) { value_.store(v, std::memory_order_relaxed); }
  void Add(int64_t n) { value_.fetch_add(n, std::memory_order_relaxed); }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

// Observations counted into buckets by upper bound (`bounds`, ascending; +Inf is implied).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf (== count)
    uint64_t count = 0;
    double sum = 0;
  };
  Snapshot Read() const;

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative, +Inf last; guarded by mu_
  double sum_ = 0;                // guarded by mu_
};

// Upper bounds, in seconds, for durations from a millisecond to ten minutes.
std::vector<double> DurationBuckets();

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // `name` is a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*; a counter's ends in
  // _total), `help` one line. A name made before with another type, or an invalid name, is a
  // programming error: it aborts.
  Counter& AddCounter(const std::string& name, const std::string& help, const MetricLabels& labels = {});
  Gauge& AddGauge(const std::string& name, const std::string& help, const MetricLabels& labels = {});
  Histogram& AddHistogram(const std::string& name, const std::string& help, const std::vector<double>& bounds,
                          const MetricLabels& labels = {});
  // A gauge read by calling `read` at each exposition (a size on disk, a count of folders).
  // `read` is called with no lock of the registry held.
  void AddGaugeFunction(const std::string& name, const std::string& help, std::function<double()> read);

  // Every metric, in the order made, in the text format (ends with a newline).
  std::string Exposition() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    std::string labels;  // `{a="b",c="d"}` or empty
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
    std::function<double()> read;
  };
  struct Family {
    std::string name, help;
    Type type;
    std::vector<std::unique_ptr<Series>> series;
  };
  Series& FindOrAdd(const std::string& name, const std::string& help, Type type, const MetricLabels& labels,
                    bool* made);  // REQUIRES: mu_ held

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Family>> families_;  // guarded by mu_
};

// A number as the text format writes it: the shortest form that reads back the same, NaN,
// +Inf, -Inf.
std::string MetricNumber(double value);

}  // namespace capsule
