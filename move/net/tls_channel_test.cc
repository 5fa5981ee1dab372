// The sidecar transport against real sockets on 127.0.0.1 and a PKI made by
// tests/make_pki.sh: who is let in, who is refused and when, and how a dead or silent peer
// shows up.
#include "move/net/tls_channel.h"

#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <random>
#include <string>
#include <thread>

#include "capsule/base/file_io.h"
#include "capsule/base/openssl_handles.h"
#include "capsule/base/temp_dir.h"
#include "gtest/gtest.h"
#include "tests/cut_proxy.h"

namespace capsule::move {
namespace {

using Clock = std::chrono::steady_clock;

class TlsChannelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string dir = capsule::testing::MakeTempDir("pki");
    pki_ = new std::string(dir);
    ASSERT_EQ(std::system(("tests/make_pki.sh " + dir).c_str()), 0);
  }
  static void TearDownTestSuite() {
    delete pki_;
    pki_ = nullptr;
  }

  static std::string File(const std::string& name) { return *pki_ + "/" + name; }
  static TlsCredentials Creds(const std::string& who) {
    return {File(who + ".pem"), File(who + ".key"), File("ca.pem")};
  }
  static TlsCredentials Server() { return Creds("server"); }
  static TlsCredentials Client() { return Creds("client"); }

  std::unique_ptr<TlsListener> StartListener(TlsCredentials credentials = Server()) {
    auto listener = TlsListener::Listen("127.0.0.1:0", credentials);
    EXPECT_TRUE(listener.ok()) << listener.status().ToString();
    return listener.ok() ? std::move(*listener) : nullptr;
  }
  static std::string Address(const TlsListener& listener) {
    return "127.0.0.1:" + std::to_string(listener.port());
  }

  // An accepted and a connected end of one trusted connection.
  void Pair(std::unique_ptr<TlsConnection>* server, std::unique_ptr<TlsConnection>* client) {
    listener_ = StartListener();
    ASSERT_NE(listener_, nullptr);
    auto accepted = std::async(std::launch::async, [&] { return listener_->Accept(); });
    auto connected = TlsConnect(Address(*listener_), Client());
    ASSERT_TRUE(connected.ok()) << connected.status().ToString();
    auto got = accepted.get();
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    *server = std::move(*got);
    *client = std::move(*connected);
  }

  static std::string* pki_;
  std::unique_ptr<TlsListener> listener_;
};

std::string* TlsChannelTest::pki_ = nullptr;

std::string RandomBytes(size_t size, unsigned seed) {
  std::mt19937 random(seed);
  std::string data(size, '\0');
  for (char& c : data) c = static_cast<char>(random());
  return data;
}

// Reads until close_notify; the error if the connection fails first.
Result<std::string> ReadAll(TlsConnection* connection) {
  std::string data;
  char buffer[16384];
  for (;;) {
    CAPSULE_ASSIGN_OR_RETURN(size_t n, connection->Read(buffer, sizeof buffer));
    if (n == 0) return data;
    data.append(buffer, n);
  }
}

// A client written straight against OpenSSL, for what TlsConnect will not do: no certificate,
// TLS 1.2, closing the socket without close_notify.
struct RawClient {
  SslCtxPtr ctx;
  SslPtr ssl;
  UniqueFd fd;

  // Connects a blocking socket and runs the handshake; returns SSL_connect's result.
  int Connect(uint16_t port, int max_version, const std::string& cert, const std::string& key,
              const std::string& ca) {
    ctx.reset(SSL_CTX_new(TLS_client_method()));
    SSL_CTX_set_max_proto_version(ctx.get(), max_version);
    if (!cert.empty()) {
      EXPECT_EQ(SSL_CTX_use_certificate_chain_file(ctx.get(), cert.c_str()), 1);
      EXPECT_EQ(SSL_CTX_use_PrivateKey_file(ctx.get(), key.c_str(), SSL_FILETYPE_PEM), 1);
    }
    EXPECT_EQ(SSL_CTX_load_verify_locations(ctx.get(), ca.c_str(), nullptr), 1);
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
    fd.Reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(port);
    EXPECT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ssl.reset(SSL_new(ctx.get()));
    SSL_set_fd(ssl.get(), fd.get());
    const int ret = SSL_connect(ssl.get());
    ERR_clear_error();
    return ret;
  }
};

TEST_F(TlsChannelTest, TrustedPairExchangesBytesBothWays) {
  std::unique_ptr<TlsConnection> server, client;
  ASSERT_NO_FATAL_FAILURE(Pair(&server, &client));
  EXPECT_EQ(server->peer_common_name(), "sidecar-b");
  EXPECT_EQ(client->peer_common_name(), "sidecar-a");
  EXPECT_EQ(client->peer(), Address(*listener_) + " (CN=sidecar-a)");
  EXPECT_EQ(server->peer().rfind("127.0.0.1:", 0), 0u) << server->peer();
  EXPECT_NE(server->peer().find(" (CN=sidecar-b)"), std::string::npos) << server->peer();

  // Small, one way and back.
  ASSERT_TRUE(client->Write("offer 7").ok());
  char buffer[64];
  auto n = server->Read(buffer, sizeof buffer);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(std::string(buffer, *n), "offer 7");
  ASSERT_TRUE(server->Write("have").ok());
  ASSERT_TRUE(ReadExactly(client.get(), buffer, 4, "answer").ok());
  EXPECT_EQ(std::string(buffer, 4), "have");

  // Large, both ways at once (so that neither end's Write can wait on the other's Read),
  // ending with close_notify: each side reads exactly what the other wrote, then 0.
  const std::string up = RandomBytes(5 << 20, 1);
  const std::string down = RandomBytes(3 << 20, 2);
  auto server_side = std::async(std::launch::async, [&]() -> Result<std::string> {
    CAPSULE_RETURN_IF_ERROR(server->Write(down));
    CAPSULE_RETURN_IF_ERROR(server->Close());
    return ReadAll(server.get());
  });
  ASSERT_TRUE(client->Write(up).ok());
  ASSERT_TRUE(client->Close().ok());
  auto client_got = ReadAll(client.get());
  auto server_got = server_side.get();
  ASSERT_TRUE(client_got.ok()) << client_got.status().ToString();
  ASSERT_TRUE(server_got.ok()) << server_got.status().ToString();
  EXPECT_TRUE(*client_got == down) << "client got " << client_got->size() << " bytes";
  EXPECT_TRUE(*server_got == up) << "server got " << server_got->size() << " bytes";
  // After Close, writing is refused rather than silently lost.
  EXPECT_FALSE(client->Write("more").ok());
}

TEST_F(TlsChannelTest, HalfCloseLetsTheAnswerComeBack) {
  // The protocol's shape: send everything, Close, then read the peer's verdict.
  std::unique_ptr<TlsConnection> server, client;
  ASSERT_NO_FATAL_FAILURE(Pair(&server, &client));
  ASSERT_TRUE(client->Write("the whole stream").ok());
  ASSERT_TRUE(client->Close().ok());
  auto got = ReadAll(server.get());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "the whole stream");
  ASSERT_TRUE(server->Write("verified").ok());
  server.reset();  // the destructor sends close_notify
  auto answer = ReadAll(client.get());
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_EQ(*answer, "verified");
}

TEST_F(TlsChannelTest, ClientWithRogueCertificateIsRefusedByTheServer) {
  auto listener = StartListener();
  ASSERT_NE(listener, nullptr);
  auto accepted = std::async(std::launch::async, [&] { return listener->Accept(); });
  TlsCredentials rogue = Creds("rogue");  // right CA file, certificate from another CA
  auto connected = TlsConnect(Address(*listener), rogue);
  ASSERT_FALSE(connected.ok());
  EXPECT_EQ(connected.status().code(), Code::kPermissionDenied) << connected.status().ToString();
  EXPECT_NE(connected.status().message().find("127.0.0.1:"), std::string::npos);
  EXPECT_NE(connected.status().message().find("does not accept this end's certificate"),
            std::string::npos)
      << connected.status().ToString();
  auto got = accepted.get();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::kPermissionDenied) << got.status().ToString();
  EXPECT_NE(got.status().message().find("127.0.0.1:"), std::string::npos);
  EXPECT_NE(got.status().message().find("not issued by the CA"), std::string::npos)
      << got.status().ToString();
}

TEST_F(TlsChannelTest, RogueBytesNeverReachTheServerAndTheListenerStaysUsable) {
  // A rogue client that writes at once after its side of the handshake (TLS 1.3 lets it):
  // the server's Accept fails, no connection (so no byte) comes out of it, and the client's
  // first read fails.
  auto listener = StartListener();
  ASSERT_NE(listener, nullptr);
  auto accepted = std::async(std::launch::async, [&] { return listener->Accept(); });
  RawClient rogue;
  ASSERT_EQ(rogue.Connect(listener->port(), TLS1_3_VERSION, File("rogue.pem"), File("rogue.key"),
                          File("ca.pem")),
            1);
  SSL_write(rogue.ssl.get(), "capsule bytes", 13);
  auto got = accepted.get();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::kPermissionDenied) << got.status().ToString();
  char byte;
  EXPECT_LE(SSL_read(rogue.ssl.get(), &byte, 1), 0);
  ERR_clear_error();

  // The same listener then serves a trusted client, which sees only its own bytes.
  auto next = std::async(std::launch::async, [&] { return listener->Accept(); });
  auto client = TlsConnect(Address(*listener), Client());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ASSERT_TRUE((*client)->Write("mine").ok());
  ASSERT_TRUE((*client)->Close().ok());
  auto server = next.get();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto data = ReadAll(server->get());
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  EXPECT_EQ(*data, "mine");
}

TEST_F(TlsChannelTest, ClientWithExpiredCertificateIsRefused) {
  auto listener = StartListener();
  ASSERT_NE(listener, nullptr);
  auto accepted = std::async(std::launch::async, [&] { return listener->Accept(); });
  auto connected = TlsConnect(Address(*listener), Creds("expired"));
  ASSERT_FALSE(connected.ok());
  EXPECT_EQ(connected.status().code(), Code::kPermissionDenied) << connected.status().ToString();
  auto got = accepted.get();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::kPermissionDenied) << got.status().ToString();
  EXPECT_NE(got.status().message().find("certificate has expired"), std::string::npos)
      << got.status().ToString();
  EXPECT_NE(got.status().message().find("outside its validity period"), std::string::npos)
      << got.status().ToString();
}

TEST_F(TlsChannelTest, CertificateForServersOnlyIsRefusedAsAClient) {
  // Either sidecar may dial the other, so a certificate must allow client use too.
  auto listener = StartListener();
  ASSERT_NE(listener, nullptr);
  auto accepted = std::async(std::launch::async, [&] { return listener->Accept(); });
  auto connected = TlsConnect(Address(*listener), Creds("server-only"));
  ASSERT_FALSE(connected.ok());
  EXPECT_EQ(connected.status().code(), Code::kPermissionDenied) << connected.status().ToString();
  auto got = accepted.get();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::kPermissionDenied) << got.status().ToString();
  EXPECT_NE(got.status().message().find("does not allow this use"), std::string::npos)
      << got.status().ToString();
}

TEST_F(TlsChannelTest, ClientWithoutCertificateIsRefused) {
  auto listener = StartListener();
  ASSERT_NE(listener, nullptr);
  auto accepted = std::async(std::launch::async, [&] { return listener->Accept(); });
  RawClient anonymous;
  anonymous.Connect(listener->port(), TLS1_3_VERSION, "", "", File("ca.pem"));
  auto got = accepted.get();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::kPermissionDenied) << got.status().ToString();
  EXPECT_NE(got.status().message().find("peer did not return a certificate"), std::string::npos)
      << got.status().ToString();
  char byte;
  EXPECT_LE(SSL_read(anonymous.ssl.get(), &byte, 1), 0);
  ERR_clear_error();
}

TEST_F(TlsChannelTest, ServerWithRogueCertificateIsRefusedByTheClient) {
  auto listener = StartListener(Creds("rogue"));
  ASSERT_NE(listener, nullptr);
  auto accepted = std::async(std::launch::async, [&] { return listener->Accept(); });
  auto connected = TlsConnect(Address(*listener), Client());
  ASSERT_FALSE(connected.ok());
  EXPECT_EQ(connected.status().code(), Code::kPermissionDenied) << connected.status().ToString();
  EXPECT_NE(connected.status().message().find("certificate verify failed"), std::string::npos)
      << connected.status().ToString();
  auto got = accepted.get();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::kPermissionDenied) << got.status().ToString();
}

TEST_F(TlsChannelTest, Tls12ClientIsRefused) {
  auto listener = StartListener();
  ASSERT_NE(listener, nullptr);
  auto accepted = std::async(std::launch::async, [&] { return listener->Accept(); });
  RawClient old;
  EXPECT_NE(old.Connect(listener->port(), TLS1_2_VERSION, File("client.pem"), File("client.key"),
                        File("ca.pem")),
            1);
  auto got = accepted.get();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::kPermissionDenied) << got.status().ToString();
  EXPECT_NE(got.status().message().find("unsupported protocol"), std::string::npos)
      << got.status().ToString();
}

TEST_F(TlsChannelTest, SilentPeerTimesOut) {
  std::unique_ptr<TlsConnection> server, client;
  ASSERT_NO_FATAL_FAILURE(Pair(&server, &client));
  server->set_timeout_seconds(1);
  const auto start = Clock::now();
  char buffer[16];
  auto n = server->Read(buffer, sizeof buffer);
  const auto waited = Clock::now() - start;
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), Code::kUnavailable) << n.status().ToString();
  EXPECT_NE(n.status().message().find("(CN=sidecar-b)"), std::string::npos);
  EXPECT_GE(waited, std::chrono::milliseconds(900));
  EXPECT_LT(waited, std::chrono::seconds(30));  // it does end
}

// A peer that ends the TCP stream without close_notify, by FIN (`orderly`) or by closing a
// socket with unread bytes (a reset): the bytes before it arrive, then Unavailable, never 0.
void ExpectVanishedPeerIsUnavailable(TlsListener* listener, const std::string& pki, bool orderly) {
  auto accepted = std::async(std::launch::async, [&] { return listener->Accept(); });
  RawClient client;
  ASSERT_EQ(client.Connect(listener->port(), TLS1_3_VERSION, pki + "/client.pem",
                           pki + "/client.key", pki + "/ca.pem"),
            1);
  auto server = accepted.get();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_EQ(SSL_write(client.ssl.get(), "half a mess", 11), 11);
  if (orderly) {
    ASSERT_EQ(shutdown(client.fd.get(), SHUT_WR), 0);  // FIN, and no close_notify before it
  } else {
    client.ssl.reset();  // no SSL_shutdown; the server's ticket is unread, so close resets
    client.fd.Reset();
  }
  char buffer[64];
  auto first = (*server)->Read(buffer, sizeof buffer);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(std::string(buffer, *first), "half a mess");
  auto second = (*server)->Read(buffer, sizeof buffer);
  ASSERT_FALSE(second.ok()) << "a vanished peer read as a clean end";
  EXPECT_EQ(second.status().code(), Code::kUnavailable) << second.status().ToString();
  EXPECT_NE(second.status().message().find("(CN=sidecar-b)"), std::string::npos);
  if (orderly) {
    EXPECT_NE(second.status().message().find("without close_notify"), std::string::npos)
        << second.status().ToString();
  }
  // And it stays failed.
  EXPECT_EQ((*server)->Read(buffer, sizeof buffer).status().code(), Code::kUnavailable);
}

TEST_F(TlsChannelTest, PeerEndingTcpWithoutCloseNotifyIsUnavailableNotEnd) {
  auto listener = StartListener();
  ASSERT_NE(listener, nullptr);
  ExpectVanishedPeerIsUnavailable(listener.get(), *pki_, /*orderly=*/true);
}

TEST_F(TlsChannelTest, PeerClosingItsSocketMidReadIsUnavailableNotEnd) {
  auto listener = StartListener();
  ASSERT_NE(listener, nullptr);
  ExpectVanishedPeerIsUnavailable(listener.get(), *pki_, /*orderly=*/false);
}

TEST_F(TlsChannelTest, LinkCutMidStreamIsUnavailableOnBothEnds) {
  auto listener = StartListener();
  ASSERT_NE(listener, nullptr);
  auto proxy = testing::CutProxy::Start(Address(*listener));
  ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();
  auto accepted = std::async(std::launch::async, [&] { return listener->Accept(); });
  auto client = TlsConnect((*proxy)->address(), Client());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto server = accepted.get();
  ASSERT_TRUE(server.ok()) << server.status().ToString();

  const uint64_t handshake = (*proxy)->bytes_client_to_server();
  (*proxy)->CutAfter(handshake + 256 * 1024);
  auto reader = std::async(std::launch::async, [&] { return ReadAll(server->get()); });
  // More than the socket buffers on the way can hold (loopback autotunes them to a few MiB),
  // so that the Write is still under way when the link goes.
  const Status wrote = (*client)->Write(std::string(32 << 20, 'x'));
  auto read = reader.get();
  ASSERT_FALSE(read.ok()) << "the server read " << read->size() << " bytes and a clean end";
  EXPECT_EQ(read.status().code(), Code::kUnavailable) << read.status().ToString();
  ASSERT_FALSE(wrote.ok());
  EXPECT_EQ(wrote.code(), Code::kUnavailable) << wrote.ToString();
  EXPECT_EQ((*proxy)->cuts(), 1);
}

TEST_F(TlsChannelTest, ListenOnPortZeroReportsARealPort) {
  auto listener = StartListener();
  ASSERT_NE(listener, nullptr);
  EXPECT_NE(listener->port(), 0);
  // Something is listening there: a plain TCP connect succeeds.
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(listener->port());
  EXPECT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  // And the port is taken: a second listener on it fails.
  auto second = TlsListener::Listen(Address(*listener), Server());
  EXPECT_FALSE(second.ok());
}

TEST_F(TlsChannelTest, ShutdownUnblocksAccept) {
  auto listener = StartListener();
  ASSERT_NE(listener, nullptr);
  auto accepted = std::async(std::launch::async, [&] { return listener->Accept(); });
  EXPECT_EQ(accepted.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  listener->Shutdown();
  ASSERT_EQ(accepted.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  auto got = accepted.get();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::kUnavailable) << got.status().ToString();
  EXPECT_EQ(listener->Accept().status().code(), Code::kUnavailable);
}

TEST_F(TlsChannelTest, ShutdownUnblocksAcceptMidHandshake) {
  // A peer that connects and says nothing holds Accept in the handshake; Shutdown frees it.
  auto listener = StartListener();
  ASSERT_NE(listener, nullptr);
  auto accepted = std::async(std::launch::async, [&] { return listener->Accept(); });
  UniqueFd mute(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(listener->port());
  ASSERT_EQ(connect(mute.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  EXPECT_EQ(accepted.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  listener->Shutdown();
  ASSERT_EQ(accepted.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(accepted.get().status().code(), Code::kUnavailable);
}

TEST_F(TlsChannelTest, ConcurrentAcceptsLetATrustedPeerPastAStalledOne) {
  // Two Accepts on two threads; a peer that connects and says nothing holds one of them in
  // its handshake, and the other serves a trusted client meanwhile.
  auto listener = StartListener();
  ASSERT_NE(listener, nullptr);
  std::future<Result<std::unique_ptr<TlsConnection>>> accepts[2];
  for (auto& accept : accepts) {
    accept = std::async(std::launch::async, [&] { return listener->Accept(); });
  }
  UniqueFd mute(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(listener->port());
  ASSERT_EQ(connect(mute.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  auto client = TlsConnect(Address(*listener), Client(), 10);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  // The one that served the client returns; the other is still waiting on the mute peer.
  int served = -1;
  for (int tries = 0; served < 0 && tries < 1000; ++tries) {
    for (int i = 0; i < 2; ++i) {
      if (accepts[i].wait_for(std::chrono::milliseconds(5)) == std::future_status::ready) {
        served = i;
      }
    }
  }
  ASSERT_GE(served, 0);
  auto server = accepts[served].get();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_EQ((*server)->peer_common_name(), "sidecar-b");
  auto& stalled = accepts[1 - served];
  EXPECT_EQ(stalled.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  listener->Shutdown();
  EXPECT_EQ(stalled.get().status().code(), Code::kUnavailable);
}

TEST_F(TlsChannelTest, SilentClientTimesOutInTheHandshake) {
  auto listener = StartListener();
  ASSERT_NE(listener, nullptr);
  listener->set_handshake_timeout_seconds(1);
  UniqueFd mute(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(listener->port());
  ASSERT_EQ(connect(mute.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  auto got = listener->Accept();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::kUnavailable) << got.status().ToString();
}

TEST_F(TlsChannelTest, BadCredentialsAreRefusedClearly) {
  TlsCredentials missing = Server();
  missing.cert_file = File("nope.pem");
  auto a = TlsListener::Listen("127.0.0.1:0", missing);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), Code::kNotFound);
  EXPECT_NE(a.status().message().find("nope.pem"), std::string::npos) << a.status().ToString();

  TlsCredentials mismatched = Server();
  mismatched.key_file = File("client.key");
  auto b = TlsListener::Listen("127.0.0.1:0", mismatched);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("does not match"), std::string::npos)
      << b.status().ToString();

  TlsCredentials bad_ca = Server();
  bad_ca.ca_file = File("server.key");  // a key, not a certificate
  auto c = TlsListener::Listen("127.0.0.1:0", bad_ca);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("CA file"), std::string::npos) << c.status().ToString();

  auto d = TlsConnect("127.0.0.1:1", missing);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kNotFound);
}

TEST_F(TlsChannelTest, ConnectsByName) {
  // "localhost" may resolve to ::1 first, where nobody listens: the next address is tried.
  auto listener = StartListener();
  ASSERT_NE(listener, nullptr);
  auto accepted = std::async(std::launch::async, [&] { return listener->Accept(); });
  const std::string name = "localhost:" + std::to_string(listener->port());
  auto connected = TlsConnect(name, Client());
  ASSERT_TRUE(connected.ok()) << connected.status().ToString();
  EXPECT_EQ((*connected)->peer(), name + " (CN=sidecar-a)");
  ASSERT_TRUE(accepted.get().ok());
}

TEST_F(TlsChannelTest, NobodyListeningIsUnavailable) {
  // A port that was free a moment ago: take one and let it go.
  uint16_t port;
  {
    auto listener = StartListener();
    ASSERT_NE(listener, nullptr);
    port = listener->port();
  }
  auto connected = TlsConnect("127.0.0.1:" + std::to_string(port), Client(), 5);
  ASSERT_FALSE(connected.ok());
  EXPECT_EQ(connected.status().code(), Code::kUnavailable) << connected.status().ToString();
  EXPECT_EQ(TlsConnect("no-port", Client()).status().code(), Code::kInvalidArgument);
}

TEST_F(TlsChannelTest, WritingToAVanishedPeerDoesNotRaiseSigpipe) {
  // With SIGPIPE at its default action, a write(2) to a closed socket would kill the test.
  std::unique_ptr<TlsConnection> server, client;
  ASSERT_NO_FATAL_FAILURE(Pair(&server, &client));
  // Make the server vanish without close_notify: shut its socket down under it.
  server.reset();
  Status status;
  const std::string chunk(1 << 20, 'x');
  for (int i = 0; i < 64 && status.ok(); ++i) status = client->Write(chunk);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), Code::kUnavailable) << status.ToString();
}

}  // namespace
}  // namespace capsule::move
