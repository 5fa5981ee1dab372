#include "capsule/base/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace capsule {

namespace {

bool ValidName(const std::string& name, bool metric) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (metric && c == ':');
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

[[noreturn]] void Misuse(const std::string& why) {
  std::fprintf(stderr, "capsule: metrics: %s\n", why.c_str());
  std::abort();
}

// A label value or a HELP text escaped as the text format asks: backslash and newline, and in
// a label value the double quote.
std::string Escape(const std::string& text, bool quote) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string LabelText(const MetricLabels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (!ValidName(labels[i].first, false) || labels[i].first == "le") Misuse("bad label name " + labels[i].first);
    if (i > 0) out += ",";
    out += labels[i].first + "=\"" + Escape(labels[i].second, true) + "\"";
  }
  return out + "}";
}

// `labels` (`{...}` or empty) with one more label appended.
std::string WithLabel(const std::string& labels, const std::string& name, const std::string& value) {
  const std::string pair = name + "=\"" + value + "\"";
  if (labels.empty()) return "{" + pair + "}";
  return labels.substr(0, labels.size() - 1) + "," + pair + "}";
}

const char* TypeName(int type) {
  static const char* const kNames[] = {"counter", "gauge", "histogram"};
  return kNames[type];
}

}  // namespace

std::string MetricNumber(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char text[64];
  auto [end, error] = std::to_chars(text, text + sizeof text, value);
  if (error != std::errc()) return "NaN";
  return std::string(text, end);
}

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  if (!std::is_sorted(bounds_.begin(), bounds_.end())) Misuse("histogram bounds not ascending");
}

void Histogram::Observe(double value) {
  const size_t bucket = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[bucket];
  sum_ += value;
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot snapshot;
  snapshot.bounds = bounds_;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t running = 0;
  for (uint64_t n : counts_) {
    running += n;
    snapshot.cumulative.push_back(running);
  }
  snapshot.count = running;
  snapshot.sum = sum_;
  return snapshot;
}

std::vector<double> DurationBuckets() {
  return {0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
}

MetricsRegistry::Series& MetricsRegistry::FindOrAdd(const std::string& name, const std::string& help, Type type,
                                                    const MetricLabels& labels, bool* made) {
  if (!ValidName(name, true)) Misuse("bad metric name " + name);
  if (type == Type::kCounter && (name.size() < 6 || name.substr(name.size() - 6) != "_total")) {
    Misuse("a counter's name ends in _total: " + name);
  }
  const std::string label_text = LabelText(labels);
  Family* family = nullptr;
  for (const auto& f : families_) {
    if (f->name == name) family = f.get();
  }
  if (family == nullptr) {
    families_.push_back(std::make_unique<Family>(Family{name, help, type, {}}));
    family = families_.back().get();
  } else if (family->type != type) {
    Misuse(name + " made before with another type");
  }
  for (const auto& s : family->series) {
    if (s->labels == label_text) {
      *made = false;
      return *s;
    }
  }
  family->series.push_back(std::make_unique<Series>());
  family->series.back()->labels = label_text;
  *made = true;
  return *family->series.back();
}

Counter& MetricsRegistry::AddCounter(const std::string& name, const std::string& help, const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  bool made = false;
  Series& series = FindOrAdd(name, help, Type::kCounter, labels, &made);
  if (made) series.counter = std::make_unique<Counter>();
  return *series.counter;
}

Gauge& MetricsRegistry::AddGauge(const std::string& name, const std::string& help, const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  bool made = false;
  Series& series = FindOrAdd(name, help, Type::kGauge, labels, &made);
  if (made) series.gauge = std::make_unique<Gauge>();
  if (!series.gauge) Misuse(name + " is read by a function");
  return *series.gauge;
}

Histogram& MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                         const std::vector<double>& bounds, const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  bool made = false;
  Series& series = FindOrAdd(name, help, Type::kHistogram, labels, &made);
  if (made) series.histogram = std::make_unique<Histogram>(bounds);
  return *series.histogram;
}

void MetricsRegistry::AddGaugeFunction(const std::string& name, const std::string& help, std::function<double()> read) {
  std::lock_guard<std::mutex> lock(mu_);
  bool made = false;
  Series& series = FindOrAdd(name, help, Type::kGauge, {}, &made);
  if (!made) Misuse(name + " made twice");
  series.read = std::move(read);
}

std::string MetricsRegistry::Exposition() const {
  // The functions are read first, outside the lock: they may take time or locks of their own.
  std::vector<std::pair<const Series*, std::function<double()>>> functions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& f : families_) {
      for (const auto& s : f->series) {
        if (s->read) functions.emplace_back(s.get(), s->read);
      }
    }
  }
  std::vector<std::pair<const Series*, double>> read;
  for (const auto& [series, function] : functions) read.emplace_back(series, function());

  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& f : families_) {
    out += "# HELP " + f->name + " " + Escape(f->help, false) + "\n";
    out += "# TYPE " + f->name + " " + TypeName(static_cast<int>(f->type)) + "\n";
    for (const auto& s : f->series) {
      if (s->counter) {
        out += f->name + s->labels + " " + std::to_string(s->counter->value()) + "\n";
      } else if (s->gauge) {
        out += f->name + s->labels + " " + std::to_string(s->gauge->value()) + "\n";
      } else if (s->read) {
        double value = 0;
        for (const auto& [series, v] : read) {
          if (series == s.get()) value = v;
        }
        out += f->name + s->labels + " " + MetricNumber(value) + "\n";
      } else if (s->histogram) {
        Histogram::Snapshot h = s->histogram->Read();
        for (size_t i = 0; i <= h.bounds.size(); ++i) {
          const std::string le = i < h.bounds.size() ? MetricNumber(h.bounds[i]) : "+Inf";
          out += f->name + "_bucket" + WithLabel(s->labels, "le", le) + " " + std::to_string(h.cumulative[i]) + "\n";
        }
        out += f->name + "_sum" + s->labels + " " + MetricNumber(h.sum) + "\n";
        out += f->name + "_count" + s->labels + " " + std::to_string(h.count) + "\n";
      }
    }
  }
  return out;
}

}  // namespace capsule
