// The metrics registry's text exposition, and its HTTP responder over a real loopback socket.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/base/metrics.h"
#include "capsule/base/metrics_server.h"

namespace capsule {
namespace {

TEST(MetricsRegistryTest, PrintsCountersGaugesAndLabelsInTheTextFormat) {
  MetricsRegistry registry;
  Counter& started = registry.AddCounter("moves_started_total", "Moves begun.");
  started.Add();
  started.Add(2);
  registry.AddCounter("refusals_total", "Refused calls.", {{"call", "offer"}, {"reason", "a \"b\"\\c\nd"}}).Add();
  // The same name and labels: the same counter.
  registry.AddCounter("refusals_total", "Refused calls.", {{"call", "offer"}, {"reason", "a \"b\"\\c\nd"}}).Add();
  registry.AddGauge("in_progress", "Now.").Set(-4);
  registry.AddGaugeFunction("bytes_on_disk", "Read at scrape.", [] { return 1.5; });
  EXPECT_EQ(registry.Exposition(),
            "# HELP moves_started_total Moves begun.\n"
            "# TYPE moves_started_total counter\n"
            "moves_started_total 3\n"
            "# HELP refusals_total Refused calls.\n"
            "# TYPE refusals_total counter\n"
            "refusals_total{call=\"offer\",reason=\"a \\\"b\\\"\\\\c\\nd\"} 2\n"
            "# HELP in_progress Now.\n"
            "# TYPE in_progress gauge\n"
            "in_progress -4\n"
            "# HELP bytes_on_disk Read at scrape.\n"
            "# TYPE bytes_on_disk gauge\n"
            "bytes_on_disk 1.5\n");
}

TEST(MetricsRegistryTest, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  MetricsRegistry registry;
  Histogram& h = registry.AddHistogram("copy_seconds", "Copy time.", {0.1, 1}, {{"side", "in"}});
  h.Observe(0.05);
  h.Observe(0.1);  // on a bound: counted in that bucket (le)
  h.Observe(0.5);
  h.Observe(7);
  EXPECT_EQ(registry.Exposition(),
            "# HELP copy_seconds Copy time.\n"
            "# TYPE copy_seconds histogram\n"
            "copy_seconds_bucket{side=\"in\",le=\"0.1\"} 2\n"
            "copy_seconds_bucket{side=\"in\",le=\"1\"} 3\n"
            "copy_seconds_bucket{side=\"in\",le=\"+Inf\"} 4\n"
            "copy_seconds_sum{side=\"in\"} 7.65\n"
            "copy_seconds_count{side=\"in\"} 4\n");
}

TEST(MetricsRegistryTest, CountersCountFromManyThreadsWithoutLoss) {
  MetricsRegistry registry;
  Counter& c = registry.AddCounter("hits_total", "Hits.");
  Histogram& h = registry.AddHistogram("hit_seconds", "Hit time.", DurationBuckets());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.Add();
        h.Observe(0.002);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(c.value(), 40000u);
  EXPECT_EQ(h.Read().count, 40000u);
}

TEST(MetricsRegistryTest, ACounterNotEndingInTotalIsAProgrammingError) {
  MetricsRegistry registry;
  EXPECT_DEATH(registry.AddCounter("hits", "Hits."), "ends in _total: hits");
  EXPECT_DEATH(registry.AddGauge("bad-name", "x"), "bad metric name bad-name");
}

// A connection to 127.0.0.1:`port`.
UniqueFd Connect(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  return fd;
}

// Sends `request` and reads until the server closes.
std::string Exchange(uint16_t port, const std::string& request) {
  UniqueFd fd = Connect(port);
  EXPECT_EQ(::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  std::string reply;
  char buffer[4096];
  ssize_t n;
  while ((n = ::recv(fd.get(), buffer, sizeof buffer, 0)) > 0) reply.append(buffer, static_cast<size_t>(n));
  return reply;
}

TEST(MetricsServerTest, AnswersGetMetricsWithTheTextFormatAndRefusesTheRest) {
  MetricsRegistry registry;
  registry.AddCounter("scrapes_total", "Scrapes.").Add(7);
  Result<std::unique_ptr<MetricsServer>> server = MetricsServer::Start("127.0.0.1:0", &registry);
  ASSERT_TRUE(server.ok()) << server.status().message();
  const uint16_t port = (*server)->port();
  ASSERT_NE(port, 0);

  std::string reply = Exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(reply.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << reply;
  EXPECT_NE(reply.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"), std::string::npos) << reply;
  EXPECT_NE(reply.find("\r\n\r\n# HELP scrapes_total Scrapes.\n# TYPE scrapes_total counter\nscrapes_total 7\n"),
            std::string::npos)
      << reply;
  const std::string body = reply.substr(reply.find("\r\n\r\n") + 4);
  EXPECT_NE(reply.find("Content-Length: " + std::to_string(body.size()) + "\r\n"), std::string::npos) << reply;

  EXPECT_EQ(Exchange(port, "GET /other HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u);
  EXPECT_EQ(Exchange(port, "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405 Method Not Allowed\r\n", 0), 0u);
  EXPECT_EQ(Exchange(port, "hello\r\n\r\n").rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u);
  EXPECT_EQ(Exchange(port, "GET /metrics HTTP/1.1\r\nX: " + std::string(9000, 'a')).rfind(
                "HTTP/1.1 431 Request Header Fields Too Large\r\n", 0),
            0u);
}

TEST(MetricsServerTest, AClientThatSaysNothingIsDroppedAndTheNextIsServed) {
  MetricsRegistry registry;
  registry.AddGauge("up", "Up.").Set(1);
  Result<std::unique_ptr<MetricsServer>> server = MetricsServer::Start("127.0.0.1:0", &registry);
  ASSERT_TRUE(server.ok()) << server.status().message();
  UniqueFd silent = Connect((*server)->port());
  const auto start = std::chrono::steady_clock::now();
  std::string reply = Exchange((*server)->port(), "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_NE(reply.find("\nup 1\n"), std::string::npos) << reply;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8));
  char c;
  EXPECT_EQ(::recv(silent.get(), &c, 1, 0), 0) << "the silent client was not closed";
}

TEST(MetricsServerTest, RefusesAnAddressItCannotListenOn) {
  MetricsRegistry registry;
  Result<std::unique_ptr<MetricsServer>> taken = MetricsServer::Start("127.0.0.1:0", &registry);
  ASSERT_TRUE(taken.ok());
  const std::string address = "127.0.0.1:" + std::to_string((*taken)->port());
  Result<std::unique_ptr<MetricsServer>> again = MetricsServer::Start(address, &registry);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().message(), address + ": Address already in use");
  Result<std::unique_ptr<MetricsServer>> bad = MetricsServer::Start("nocolon", &registry);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "nocolon: not HOST:PORT");
}

}  // namespace
}  // namespace capsule
