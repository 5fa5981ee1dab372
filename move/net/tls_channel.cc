#include "move/net/tls_channel.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "capsule/base/file_io.h"
#include "capsule/base/openssl_handles.h"
#include "move/net/tls_socket.h"

namespace capsule::move {
namespace {

using tls_socket::AddrInfo;
using tls_socket::AttachSocket;
using tls_socket::ConnectSocket;
using tls_socket::Deadline;
using tls_socket::EventsFor;
using tls_socket::FormatAddress;
using tls_socket::NewSocket;
using tls_socket::PeerAddress;
using tls_socket::SetNoDelay;
using tls_socket::WaitResult;
using tls_socket::WaitSocket;

// ---------------------------------------------------------------------------------------------
// Credentials and contexts.

using X509Ptr = std::unique_ptr<X509, OpenSslDeleter<X509, X509_free>>;

// The most each credential file may hold: a certificate is a few KiB, a CA file may bundle
// many, a private key is a few hundred bytes.
constexpr uint64_t kMaxCertificateFileBytes = 1 << 20;
constexpr uint64_t kMaxCaFileBytes = 4 << 20;
constexpr uint64_t kMaxPrivateKeyFileBytes = 64 << 10;

// The bytes of the file at `path` that serves as `role` ("certificate"), read bounded from a
// regular file only: a FIFO or a character device is refused, never waited on or read
// forever. OpenSSL parses them from memory and never opens the file itself.
Status ReadCredential(const std::string& path, const std::string& role, uint64_t max, std::string_view what,
                      std::string* bytes) {
  if (path.empty()) return Status::InvalidArgument(role, "no file given");
  Result<std::string> read = ReadFileBounded(path, max, what);
  if (!read.ok()) return read.status().WithContext(role);
  *bytes = std::move(read).value();
  return Status::Ok();
}

Result<BioPtr> MemoryBio(const std::string& bytes) {
  BioPtr bio(BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())));
  if (bio == nullptr) return OpenSslError("BIO_new_mem_buf", Code::kIOError);
  return bio;
}

// Whether the error OpenSSL left is only "no more PEM blocks" (the end of a file of several);
// it is then cleared.
bool OnlyEndOfPem() {
  const unsigned long last = ERR_peek_last_error();
  if (ERR_GET_LIB(last) != ERR_LIB_PEM || ERR_GET_REASON(last) != PEM_R_NO_START_LINE) return false;
  ERR_clear_error();
  return true;
}

// As SSL_CTX_use_certificate_chain_file: the first certificate is this end's, those after it
// its chain.
Status UseCertificateChain(SSL_CTX* ctx, const std::string& bytes, const std::string& path) {
  CAPSULE_ASSIGN_OR_RETURN(BioPtr bio, MemoryBio(bytes));
  X509Ptr leaf(PEM_read_bio_X509_AUX(bio.get(), nullptr, nullptr, nullptr));
  if (leaf == nullptr || SSL_CTX_use_certificate(ctx, leaf.get()) != 1 || SSL_CTX_clear_chain_certs(ctx) != 1) {
    return OpenSslError("certificate " + path);
  }
  for (;;) {
    X509Ptr next(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (next == nullptr) break;
    if (SSL_CTX_add0_chain_cert(ctx, next.get()) != 1) return OpenSslError("certificate " + path);
    next.release();  // the context owns it now
  }
  if (!OnlyEndOfPem()) return OpenSslError("certificate " + path);
  return Status::Ok();
}

// The CA file's certificates (and revocation lists), as SSL_CTX_load_verify_locations takes
// them: at least one certificate.
Status UseCaFile(SSL_CTX* ctx, const std::string& bytes, const std::string& path) {
  CAPSULE_ASSIGN_OR_RETURN(BioPtr bio, MemoryBio(bytes));
  STACK_OF(X509_INFO)* infos = PEM_X509_INFO_read_bio(bio.get(), nullptr, nullptr, nullptr);
  if (infos == nullptr) return OpenSslError("CA file " + path);
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  int certificates = 0;
  bool added = true;
  for (int i = 0; i < sk_X509_INFO_num(infos) && added; ++i) {
    X509_INFO* info = sk_X509_INFO_value(infos, i);
    if (info->x509 != nullptr) {
      added = X509_STORE_add_cert(store, info->x509) == 1;
      ++certificates;
    }
    if (added && info->crl != nullptr) added = X509_STORE_add_crl(store, info->crl) == 1;
  }
  sk_X509_INFO_pop_free(infos, X509_INFO_free);
  if (!added) return OpenSslError("CA file " + path);
  if (certificates == 0) return Status::InvalidArgument("CA file " + path, "holds no PEM certificate");
  return Status::Ok();
}

// A private key's bytes, wiped when they go.
struct SecretBytes {
  std::string bytes;
  ~SecretBytes() { OPENSSL_cleanse(bytes.data(), bytes.size()); }
};

// A context with this end's certificate and key, the CA as the only trust anchor, TLS 1.3
// and nothing else, and peer verification on.
Result<SslCtxPtr> MakeContext(const TlsCredentials& credentials, bool server) {
  // The three files are read before any is parsed: one that is no regular file, or too
  // large, is refused first.
  std::string cert, ca;
  SecretBytes key;
  CAPSULE_RETURN_IF_ERROR(
      ReadCredential(credentials.cert_file, "certificate", kMaxCertificateFileBytes, "a certificate", &cert));
  CAPSULE_RETURN_IF_ERROR(
      ReadCredential(credentials.key_file, "private key", kMaxPrivateKeyFileBytes, "a private key", &key.bytes));
  CAPSULE_RETURN_IF_ERROR(ReadCredential(credentials.ca_file, "CA file", kMaxCaFileBytes, "a CA file", &ca));

  ERR_clear_error();
  SslCtxPtr ctx(SSL_CTX_new(server ? TLS_server_method() : TLS_client_method()));
  if (ctx == nullptr) return OpenSslError("SSL_CTX_new", Code::kIOError);
  if (SSL_CTX_set_min_proto_version(ctx.get(), TLS1_3_VERSION) != 1 ||
      SSL_CTX_set_max_proto_version(ctx.get(), TLS1_3_VERSION) != 1) {
    return OpenSslError("TLS 1.3 not available");
  }
  CAPSULE_RETURN_IF_ERROR(UseCertificateChain(ctx.get(), cert, credentials.cert_file));
  CAPSULE_ASSIGN_OR_RETURN(BioPtr key_bio, MemoryBio(key.bytes));
  EvpPkeyPtr private_key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (private_key == nullptr || SSL_CTX_use_PrivateKey(ctx.get(), private_key.get()) != 1 ||
      SSL_CTX_check_private_key(ctx.get()) != 1) {
    // OpenSSL compares the key with the certificate as it loads it: name both files then.
    const unsigned long first = ERR_peek_error();
    if (ERR_GET_LIB(first) == ERR_LIB_X509 && ERR_GET_REASON(first) == X509_R_KEY_VALUES_MISMATCH) {
      return OpenSslError("private key " + credentials.key_file + " does not match certificate " +
                          credentials.cert_file);
    }
    return OpenSslError("private key " + credentials.key_file);
  }
  // The CA file and nothing else: SSL_CTX_set_default_verify_paths is never called, so the
  // system's trust store plays no part.
  CAPSULE_RETURN_IF_ERROR(UseCaFile(ctx.get(), ca, credentials.ca_file));
  if (server) {
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    // The server's session ticket is the client's signal that its certificate passed (see
    // the header); one is enough. Nobody resumes sessions.
    SSL_CTX_set_num_tickets(ctx.get(), 1);
  } else {
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
    // Makes OpenSSL hand each session ticket to the callback TlsConnect sets (and keep none).
    SSL_CTX_set_session_cache_mode(ctx.get(),
                                   SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  }
  // A non-blocking SSL_write may be retried after a partial record with the same bytes.
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  return ctx;
}

std::string CommonNameOf(SSL* ssl) {
  X509* cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr) return "";
  X509_NAME* subject = X509_get_subject_name(cert);
  const int index = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (index < 0) return "";
  ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index));
  unsigned char* utf8 = nullptr;
  const int length = ASN1_STRING_to_UTF8(&utf8, data);
  if (length < 0) return "";
  std::string name(reinterpret_cast<char*>(utf8), static_cast<size_t>(length));
  OPENSSL_free(utf8);
  // The name ends up in messages on a terminal: no control characters from a certificate.
  for (char& c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return name;
}

// ---------------------------------------------------------------------------------------------
// Handshakes.

// A plain-words reading of the usual refusals, after OpenSSL's own reason.
std::string Explain(unsigned long error, long verify) {
  switch (verify) {
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_CERT_SIGNATURE_FAILURE:
      return "; the peer's certificate was not issued by the CA in this end's CA file";
    case X509_V_ERR_CERT_HAS_EXPIRED:
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return "; the peer's certificate is outside its validity period (check both clocks)";
    case X509_V_ERR_INVALID_PURPOSE:
      return "; the peer's certificate does not allow this use (a sidecar's needs "
             "extendedKeyUsage serverAuth and clientAuth)";
    default:
      break;
  }
  if (ERR_GET_LIB(error) != ERR_LIB_SSL) return "";
  switch (ERR_GET_REASON(error)) {
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
      return "; the peer does not accept this end's certificate";
    case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
      return "; a sidecar must present a certificate";
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_TLSV1_ALERT_PROTOCOL_VERSION:
      return "; both ends must speak TLS 1.3";
    default:
      return "";
  }
}

// Why the handshake with `peer` failed, as a Status: PermissionDenied when TLS refused it (a
// certificate, a version, an alert from the peer), Unavailable when the peer vanished.
Status HandshakeFailure(SSL* ssl, int ret, const std::string& peer) {
  const int saved_errno = errno;  // of the failed socket call, if that is what failed
  const int error = SSL_get_error(ssl, ret);
  const std::string what = "TLS handshake with " + peer;
  if (error == SSL_ERROR_SSL) {
    const unsigned long first = ERR_peek_error();
    std::string reasons = DrainOpenSslErrors();
    const long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) {
      reasons += std::string(" (") + X509_verify_cert_error_string(verify) + ")";
    }
    if (ERR_GET_LIB(first) == ERR_LIB_SSL &&
        ERR_GET_REASON(first) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
      return Status::Unavailable(what, "peer closed the connection: " + reasons);
    }
    return Status::PermissionDenied(what, "refused: " + reasons + Explain(first, verify));
  }
  if (error == SSL_ERROR_SYSCALL) {
    ERR_clear_error();
    if (saved_errno != 0) return Status::Unavailable(what, std::strerror(saved_errno));
    return Status::Unavailable(what, "peer closed the connection");
  }
  if (error == SSL_ERROR_ZERO_RETURN) {
    return Status::Unavailable(what, "peer closed the connection");
  }
  return Status::Unavailable(what,
                             "failed: " + DrainOpenSslErrors("SSL error " + std::to_string(error)));
}

// Drives SSL_accept or SSL_connect to the end by `deadline`. `wake_fd` (or -1) interrupts
// the wait with Unavailable saying `woken_why`.
Status RunHandshake(SSL* ssl, int fd, const Deadline& deadline, int timeout_seconds, int wake_fd,
                    const std::string& peer, const std::string& woken_why = "") {
  const std::string what = "TLS handshake with " + peer;
  for (;;) {
    ERR_clear_error();
    errno = 0;
    const int ret = SSL_do_handshake(ssl);
    if (ret == 1) return Status::Ok();
    const int error = SSL_get_error(ssl, ret);
    if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) {
      return HandshakeFailure(ssl, ret, peer);
    }
    CAPSULE_ASSIGN_OR_RETURN(WaitResult waited,
                             WaitSocket(fd, EventsFor(error), deadline, wake_fd, what));
    if (waited == WaitResult::kWoken) return Status::Unavailable(what, woken_why);
    if (waited == WaitResult::kTimeout) {
      return Status::Unavailable(what,
                                 "not complete after " + std::to_string(timeout_seconds) + " s");
    }
  }
}

// Set by the client's session callback: the server sent a ticket, so it accepted us.
int TicketIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

int OnSessionTicket(SSL* ssl, SSL_SESSION*) {
  SSL_set_ex_data(ssl, TicketIndex(), reinterpret_cast<void*>(1));
  return 0;  // not kept: nobody resumes sessions
}

// After the client's handshake: waits until the server has accepted the client's certificate
// (its session ticket or application data arrives) or refused it (an alert arrives).
Status AwaitServerAcceptance(SSL* ssl, int fd, const Deadline& deadline, int timeout_seconds,
                             const std::string& peer) {
  const std::string what = "TLS handshake with " + peer;
  for (;;) {
    if (SSL_get_ex_data(ssl, TicketIndex()) != nullptr) return Status::Ok();
    ERR_clear_error();
    errno = 0;
    char byte;
    const int ret = SSL_peek(ssl, &byte, 1);
    if (ret > 0) return Status::Ok();  // data from the server: it certainly accepted us
    const int error = SSL_get_error(ssl, ret);
    if (error == SSL_ERROR_ZERO_RETURN) return Status::Ok();  // accepted, then closed cleanly
    if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) {
      return HandshakeFailure(ssl, ret, peer);
    }
    if (SSL_get_ex_data(ssl, TicketIndex()) != nullptr) return Status::Ok();
    CAPSULE_ASSIGN_OR_RETURN(WaitResult waited,
                             WaitSocket(fd, EventsFor(error), deadline, -1, what));
    if (waited == WaitResult::kTimeout) {
      return Status::Unavailable(what, "the server did not accept or refuse this end within " +
                                           std::to_string(timeout_seconds) + " s");
    }
  }
}

// Belt and braces: the handshake succeeded, so OpenSSL verified the peer; say so explicitly.
Status CheckVerified(SSL* ssl, const std::string& peer) {
  if (SSL_get0_peer_certificate(ssl) == nullptr) {
    return Status::PermissionDenied("TLS handshake with " + peer, "peer sent no certificate");
  }
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) {
    return Status::PermissionDenied("TLS handshake with " + peer,
                                    X509_verify_cert_error_string(verify));
  }
  if (SSL_version(ssl) != TLS1_3_VERSION) {
    return Status::PermissionDenied("TLS handshake with " + peer, "not TLS 1.3");
  }
  return Status::Ok();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// TlsConnection

TlsConnection::TlsConnection(UniqueFd fd, SslPtr ssl, std::string address, std::string common_name)
    : fd_(std::move(fd)),
      ssl_(std::move(ssl)),
      common_name_(std::move(common_name)),
      peer_(std::move(address) + " (CN=" + common_name_ + ")") {}

TlsConnection::~TlsConnection() {
  if (!broken_ && !closed_) {
    // One try, never waiting: a peer that is not reading does not hold up the destructor.
    ERR_clear_error();
    SSL_shutdown(ssl_.get());
    ERR_clear_error();
  }
  ssl_.reset();  // before fd_ closes, although the BIO never closes the fd itself
}

Status TlsConnection::WaitFor(int ssl_error, const char* doing) {
  CAPSULE_ASSIGN_OR_RETURN(
      WaitResult waited, WaitSocket(fd_.get(), EventsFor(ssl_error), Deadline(timeout_seconds_), -1,
                                    std::string(doing) + " " + peer_));
  if (waited == WaitResult::kTimeout) {
    broken_ = true;
    return Status::Unavailable(std::string(doing) + " " + peer_,
                               "no progress for " + std::to_string(timeout_seconds_) + " s");
  }
  return Status::Ok();
}

Status TlsConnection::Failure(int ret, const char* doing) {
  const int saved_errno = errno;  // of the failed socket call, if that is what failed
  const int error = SSL_get_error(ssl_.get(), ret);
  broken_ = true;
  const std::string what = std::string(doing) + " " + peer_;
  if (error == SSL_ERROR_SYSCALL) {
    ERR_clear_error();
    if (saved_errno == 0) return Status::Unavailable(what, "peer closed the connection");
    return Status::Unavailable(what, std::strerror(saved_errno));
  }
  if (error == SSL_ERROR_SSL) {
    const unsigned long first = ERR_peek_error();
    const std::string reasons = DrainOpenSslErrors();
    if (ERR_GET_LIB(first) == ERR_LIB_SSL &&
        ERR_GET_REASON(first) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
      return Status::Unavailable(what, "peer closed the connection without close_notify");
    }
    return Status::Unavailable(what, reasons);
  }
  return Status::Unavailable(what, DrainOpenSslErrors("SSL error " + std::to_string(error)));
}

Result<size_t> TlsConnection::Read(char* buffer, size_t size) {
  if (broken_) return Status::Unavailable("read from " + peer_, "connection already failed");
  if (size == 0) return size_t{0};
  const int want = size > INT_MAX ? INT_MAX : static_cast<int>(size);
  for (;;) {
    ERR_clear_error();
    errno = 0;
    const int ret = SSL_read(ssl_.get(), buffer, want);
    if (ret > 0) return static_cast<size_t>(ret);
    const int error = SSL_get_error(ssl_.get(), ret);
    if (error == SSL_ERROR_ZERO_RETURN) return size_t{0};  // close_notify
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
      CAPSULE_RETURN_IF_ERROR(WaitFor(error, "read from"));
      continue;
    }
    return Failure(ret, "read from");
  }
}

Status TlsConnection::Write(std::string_view data) {
  if (broken_) return Status::Unavailable("write to " + peer_, "connection already failed");
  if (closed_) return Status::FailedPrecondition("write to " + peer_, "connection closed");
  while (!data.empty()) {
    // SSL_write takes an int; without SSL_MODE_ENABLE_PARTIAL_WRITE it reports all of a
    // chunk or nothing, and a retry repeats the same chunk.
    const int chunk = data.size() > (1u << 30) ? (1 << 30) : static_cast<int>(data.size());
    ERR_clear_error();
    errno = 0;
    const int ret = SSL_write(ssl_.get(), data.data(), chunk);
    if (ret > 0) {
      data.remove_prefix(static_cast<size_t>(ret));
      continue;
    }
    const int error = SSL_get_error(ssl_.get(), ret);
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
      CAPSULE_RETURN_IF_ERROR(WaitFor(error, "write to"));
      continue;
    }
    return Failure(ret, "write to");
  }
  return Status::Ok();
}

Status TlsConnection::Close() {
  if (closed_) return Status::Ok();
  if (broken_) return Status::Unavailable("close " + peer_, "connection already failed");
  for (;;) {
    ERR_clear_error();
    errno = 0;
    // 0 means "close_notify sent, the peer's not yet seen": we do not wait for the peer's.
    const int ret = SSL_shutdown(ssl_.get());
    if (ret >= 0) break;
    const int error = SSL_get_error(ssl_.get(), ret);
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
      CAPSULE_RETURN_IF_ERROR(WaitFor(error, "close"));
      continue;
    }
    return Failure(ret, "close");
  }
  closed_ = true;
  if (shutdown(fd_.get(), SHUT_WR) != 0 && errno != ENOTCONN) {
    return Status::Unavailable("close " + peer_, std::strerror(errno));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// TlsListener

TlsListener::TlsListener(UniqueFd fd, UniqueFd wake_fd, SslCtxPtr ctx, uint16_t port)
    : fd_(std::move(fd)), wake_fd_(std::move(wake_fd)), ctx_(std::move(ctx)), port_(port) {}

TlsListener::~TlsListener() = default;

Result<std::unique_ptr<TlsListener>> TlsListener::Listen(const std::string& host_port,
                                                         const TlsCredentials& credentials) {
  CAPSULE_ASSIGN_OR_RETURN(SslCtxPtr ctx, MakeContext(credentials, /*server=*/true));
  CAPSULE_ASSIGN_OR_RETURN(auto addresses, AddrInfo::Resolve(host_port, /*passive=*/true));
  Status last = Status::Unavailable("listen on " + host_port, "no address to listen on");
  for (const addrinfo* a = addresses->list(); a != nullptr; a = a->ai_next) {
    CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, NewSocket(a->ai_family));
    const int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      last = Status::IOError("listen on " + host_port + ": bind", errno);
      continue;
    }
    if (listen(fd.get(), kListenBacklog) != 0) {
      last = Status::IOError("listen on " + host_port + ": listen", errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t length = sizeof bound;
    if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
      return Status::IOError("listen on " + host_port + ": getsockname", errno);
    }
    const uint16_t port = bound.ss_family == AF_INET6
                              ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                              : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake.valid()) return Status::IOError("eventfd", errno);
    return std::unique_ptr<TlsListener>(
        new TlsListener(std::move(fd), std::move(wake), std::move(ctx), port));
  }
  return last;
}

void TlsListener::Shutdown() {
  shut_down_.store(true);
  // The eventfd stays readable (nobody reads it), so every wait, now or later, wakes.
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = write(wake_fd_.get(), &one, sizeof one);
}

bool TlsListener::WaitForConnection(int timeout_ms) {
  pollfd fds[2] = {{fd_.get(), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
  int n = ::poll(fds, 2, timeout_ms);
  return n != 0;  // an error (EINTR) too: AcceptSocket then decides
}

Result<AcceptedSocket> TlsListener::AcceptSocket() {
  const std::string what = "accept on port " + std::to_string(port_);
  UniqueFd fd;
  for (;;) {
    if (shut_down_.load()) return Status::Unavailable(what, "listener shut down");
    CAPSULE_ASSIGN_OR_RETURN(WaitResult waited,
                             WaitSocket(fd_.get(), POLLIN, Deadline(0), wake_fd_.get(), what));
    if (waited == WaitResult::kWoken) return Status::Unavailable(what, "listener shut down");
    fd.Reset(accept4(fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (fd.valid()) break;
    // Gone before we took it, or another thread took it: wait for the next.
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) {
      continue;
    }
    return Status::IOError(what, errno);
  }
  SetNoDelay(fd.get());
  AcceptedSocket accepted;
  Result<std::string> address = PeerAddress(fd.get());
  accepted.address = address.ok() ? *address : "unknown peer";
  accepted.host = accepted.address.substr(0, accepted.address.rfind(':'));
  if (accepted.host.size() >= 2 && accepted.host.front() == '[') {
    accepted.host = accepted.host.substr(1, accepted.host.size() - 2);
  }
  accepted.fd = std::move(fd);
  return accepted;
}

Result<std::unique_ptr<TlsConnection>> TlsListener::Handshake(AcceptedSocket socket,
                                                              int timeout_seconds, int wake_fd,
                                                              const std::string& woken_why) {
  const std::string& peer = socket.address;
  ERR_clear_error();
  SslPtr ssl(SSL_new(ctx_.get()));
  if (ssl == nullptr) return OpenSslError("SSL_new", Code::kIOError);
  CAPSULE_RETURN_IF_ERROR(AttachSocket(ssl.get(), socket.fd.get()));
  SSL_set_accept_state(ssl.get());
  CAPSULE_RETURN_IF_ERROR(RunHandshake(ssl.get(), socket.fd.get(), Deadline(timeout_seconds),
                                       timeout_seconds, wake_fd, peer, woken_why));
  CAPSULE_RETURN_IF_ERROR(CheckVerified(ssl.get(), peer));
  std::string common_name = CommonNameOf(ssl.get());
  return std::make_unique<TlsConnection>(std::move(socket.fd), std::move(ssl), peer,
                                         std::move(common_name));
}

Result<std::unique_ptr<TlsConnection>> TlsListener::Accept() {
  CAPSULE_ASSIGN_OR_RETURN(AcceptedSocket socket, AcceptSocket());
  return Handshake(std::move(socket), handshake_timeout_seconds_.load(), wake_fd_.get(),
                   "listener shut down");
}

// ---------------------------------------------------------------------------------------------
// TlsConnect

Result<std::unique_ptr<TlsConnection>> TlsConnect(const std::string& host_port,
                                                  const TlsCredentials& credentials,
                                                  int timeout_seconds) {
  const Deadline deadline(timeout_seconds);
  CAPSULE_ASSIGN_OR_RETURN(SslCtxPtr ctx, MakeContext(credentials, /*server=*/false));
  SSL_CTX_sess_set_new_cb(ctx.get(), OnSessionTicket);
  CAPSULE_ASSIGN_OR_RETURN(auto addresses, AddrInfo::Resolve(host_port, /*passive=*/false));

  // Try each address the name resolves to ("localhost": ::1, then 127.0.0.1) until one
  // answers. The peer is named as the caller named it.
  const std::string& peer = host_port;
  Status last = Status::Unavailable("connect to " + host_port, "no address");
  UniqueFd fd;
  for (const addrinfo* a = addresses->list(); a != nullptr; a = a->ai_next) {
    CAPSULE_ASSIGN_OR_RETURN(UniqueFd candidate, NewSocket(a->ai_family));
    Result<std::string> address = FormatAddress(a->ai_addr, a->ai_addrlen);
    const std::string label =
        !address.ok() || *address == host_port ? host_port : host_port + " (" + *address + ")";
    last = ConnectSocket(candidate.get(), a, deadline, timeout_seconds, label);
    if (last.ok()) {
      fd = std::move(candidate);
      break;
    }
  }
  if (!fd.valid()) return last;
  SetNoDelay(fd.get());

  ERR_clear_error();
  SslPtr ssl(SSL_new(ctx.get()));
  if (ssl == nullptr) return OpenSslError("SSL_new", Code::kIOError);
  CAPSULE_RETURN_IF_ERROR(AttachSocket(ssl.get(), fd.get()));
  SSL_set_connect_state(ssl.get());
  CAPSULE_RETURN_IF_ERROR(RunHandshake(ssl.get(), fd.get(), deadline, timeout_seconds, -1, peer));
  CAPSULE_RETURN_IF_ERROR(CheckVerified(ssl.get(), peer));
  CAPSULE_RETURN_IF_ERROR(
      AwaitServerAcceptance(ssl.get(), fd.get(), deadline, timeout_seconds, peer));
  std::string common_name = CommonNameOf(ssl.get());
  return std::make_unique<TlsConnection>(std::move(fd), std::move(ssl), peer,
                                         std::move(common_name));
}

}  // namespace capsule::move
