#include "move/fleet/etcd_client.h"

#include <curl/curl.h>
#include <openssl/evp.h>

#include <memory>
#include <mutex>

#include "capsule/base/canonical_json.h"

namespace capsule::fleet {

namespace {

struct CurlDeleter {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
};
using CurlPtr = std::unique_ptr<CURL, CurlDeleter>;
struct SlistDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};
using SlistPtr = std::unique_ptr<curl_slist, SlistDeleter>;

size_t Append(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

// etcd's gateway writes 64-bit integers as strings ("5"); a missing field is 0.
int64_t Int(const Json& object, const char* name) {
  if (!object.is_object() || !object.contains(name)) return 0;
  const Json& value = object[name];
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_string()) {
    try {
      return std::stoll(value.get<std::string>());
    } catch (...) {
      return 0;
    }
  }
  return 0;
}

Result<KeyValue> ToKeyValue(const Json& kv) {
  KeyValue out;
  CAPSULE_ASSIGN_OR_RETURN(out.key, FromBase64(kv.value("key", "")));
  CAPSULE_ASSIGN_OR_RETURN(out.value, FromBase64(kv.value("value", "")));
  out.mod_revision = Int(kv, "mod_revision");
  out.create_revision = Int(kv, "create_revision");
  out.lease = Int(kv, "lease");
  return out;
}

// The end of the range of keys that begin with `prefix` (etcd's range_end).
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    if (static_cast<unsigned char>(prefix.back()) < 0xff) {
      prefix.back() = static_cast<char>(prefix.back() + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

Result<Json> ParseReply(const std::string& text, const std::string& what) {
  CAPSULE_ASSIGN_OR_RETURN(Json reply, ParseJson(text, what, Code::kCorruption));
  if (!reply.is_object()) return Status::Corruption(what, "etcd's reply is not a JSON object");
  return reply;
}

}  // namespace

std::string Base64(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

Result<std::string> FromBase64(const std::string& text) {
  if (text.empty()) return std::string();
  if (text.size() % 4 != 0) return Status::Corruption("etcd reply", "a key or value is not base64");
  std::string out(text.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0) return Status::Corruption("etcd reply", "a key or value is not base64");
  size_t padding = text.size() >= 2 && text[text.size() - 2] == '=' ? 2 : (text.back() == '=' ? 1 : 0);
  out.resize(static_cast<size_t>(n) - padding);
  return out;
}

Result<FleetOptions> ParseFleetUrl(const std::string& url) {
  const std::string scheme = "etcd://";
  if (url.rfind(scheme, 0) != 0) {
    return Status::InvalidArgument("--fleet " + url, "expected etcd://HOST:PORT[,HOST:PORT...]");
  }
  FleetOptions options;
  options.url = url;
  std::string rest = url.substr(scheme.size());
  size_t start = 0;
  while (start <= rest.size()) {
    size_t comma = rest.find(',', start);
    std::string endpoint = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t colon = endpoint.rfind(':');
    bool port_ok = colon != std::string::npos && colon > 0 && colon + 1 < endpoint.size() &&
                   endpoint.find_first_not_of("0123456789", colon + 1) == std::string::npos &&
                   endpoint.size() - colon - 1 <= 5;
    if (!port_ok || endpoint.find_first_of("/?#@ ") != std::string::npos) {
      return Status::InvalidArgument("--fleet " + url, "'" + endpoint + "' is not HOST:PORT");
    }
    options.endpoints.push_back(endpoint);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return options;
}

EtcdClient::EtcdClient(FleetOptions options) : options_(std::move(options)) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

Result<std::string> EtcdClient::Post(const std::string& path, const std::string& body) const {
  const bool tls = !options_.cacert.empty();
  std::string tried;
  for (const std::string& endpoint : options_.endpoints) {
    CurlPtr curl(curl_easy_init());
    if (!curl) return Status::IOError("etcd " + endpoint, "curl_easy_init failed");
    const std::string url = (tls ? "https://" : "http://") + endpoint + path;
    SlistPtr headers(curl_slist_append(nullptr, "Content-Type: application/json"));
    std::string reply;
    curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl.get(), CURLOPT_PROTOCOLS_STR, tls ? "https" : "http");
    curl_easy_setopt(curl.get(), CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl.get(), CURLOPT_NOPROXY, "*");
    curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(curl.get(), CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(curl.get(), CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, Append);
    curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &reply);
    curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(options_.timeout_ms));
    curl_easy_setopt(curl.get(), CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::min(options_.timeout_ms, 2000)));
    if (tls) {
      curl_easy_setopt(curl.get(), CURLOPT_CAINFO, options_.cacert.c_str());
      if (!options_.cert.empty()) curl_easy_setopt(curl.get(), CURLOPT_SSLCERT, options_.cert.c_str());
      if (!options_.key.empty()) curl_easy_setopt(curl.get(), CURLOPT_SSLKEY, options_.key.c_str());
    }
    CURLcode code = curl_easy_perform(curl.get());
    long sent = 0;
    curl_easy_getinfo(curl.get(), CURLINFO_REQUEST_SIZE, &sent);
    if (code != CURLE_OK && sent == 0) {
      // Never reached etcd: the next endpoint may take it.
      tried += (tried.empty() ? "" : "; ") + endpoint + ": " + curl_easy_strerror(code);
      continue;
    }
    if (code != CURLE_OK) {
      return Status::Unavailable("etcd " + endpoint + path, std::string("no answer (") + curl_easy_strerror(code) +
                                                                "; no quorum?): a write's outcome is unknown");
    }
    long http = 0;
    curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &http);
    if (http != 200) {
      Result<Json> error = ParseReply(reply, "etcd " + endpoint + path);
      std::string message = error.ok() ? error->value("message", error->value("error", reply)) : reply;
      return Status::Unavailable("etcd " + endpoint + path,
                                 "answered HTTP " + std::to_string(http) + " (" + message + "): a write's outcome is unknown");
    }
    return reply;
  }
  return Status::Unavailable("etcd " + options_.url, "no endpoint could be reached (" + tried + ")");
}

Result<std::optional<KeyValue>> EtcdClient::Get(const std::string& key) const {
  Json body = {{"key", Base64(key)}};
  CAPSULE_ASSIGN_OR_RETURN(std::string text, Post("/v3/kv/range", JsonText(body)));
  CAPSULE_ASSIGN_OR_RETURN(Json reply, ParseReply(text, "etcd range " + key));
  if (!reply.contains("kvs") || !reply["kvs"].is_array() || reply["kvs"].empty()) return std::optional<KeyValue>();
  CAPSULE_ASSIGN_OR_RETURN(KeyValue kv, ToKeyValue(reply["kvs"][0]));
  return std::optional<KeyValue>(std::move(kv));
}

Result<std::vector<KeyValue>> EtcdClient::List(const std::string& prefix) const {
  Json body = {{"key", Base64(prefix)}, {"range_end", Base64(PrefixEnd(prefix))}};
  CAPSULE_ASSIGN_OR_RETURN(std::string text, Post("/v3/kv/range", JsonText(body)));
  CAPSULE_ASSIGN_OR_RETURN(Json reply, ParseReply(text, "etcd range " + prefix));
  std::vector<KeyValue> out;
  if (!reply.contains("kvs") || !reply["kvs"].is_array()) return out;
  for (const Json& kv : reply["kvs"]) {
    CAPSULE_ASSIGN_OR_RETURN(KeyValue one, ToKeyValue(kv));
    out.push_back(std::move(one));
  }
  return out;
}

Result<int64_t> EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) const {
  Json body = {{"key", Base64(key)}, {"value", Base64(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  CAPSULE_ASSIGN_OR_RETURN(std::string text, Post("/v3/kv/put", JsonText(body)));
  CAPSULE_ASSIGN_OR_RETURN(Json reply, ParseReply(text, "etcd put " + key));
  return Int(reply.value("header", Json::object()), "revision");
}

Result<TxnResult> EtcdClient::Txn(const std::vector<Compare>& compares, const std::vector<Write>& writes) const {
  Json compare = Json::array();
  for (const Compare& c : compares) {
    compare.push_back({{"key", Base64(c.key)},
                       {"target", "MOD"},
                       {"result", "EQUAL"},
                       {"mod_revision", std::to_string(c.mod_revision)}});
  }
  Json success = Json::array();
  for (const Write& w : writes) {
    if (w.remove) {
      success.push_back({{"request_delete_range", {{"key", Base64(w.key)}}}});
    } else {
      Json put = {{"key", Base64(w.key)}, {"value", Base64(w.value)}};
      if (w.lease != 0) put["lease"] = std::to_string(w.lease);
      success.push_back({{"request_put", put}});
    }
  }
  Json body = {{"compare", compare}, {"success", success}};
  CAPSULE_ASSIGN_OR_RETURN(std::string text, Post("/v3/kv/txn", JsonText(body)));
  CAPSULE_ASSIGN_OR_RETURN(Json reply, ParseReply(text, "etcd txn"));
  TxnResult result;
  result.succeeded = reply.value("succeeded", false);
  result.revision = Int(reply.value("header", Json::object()), "revision");
  return result;
}

Result<int64_t> EtcdClient::GrantLease(int64_t ttl_seconds) const {
  Json body = {{"TTL", std::to_string(ttl_seconds)}};
  CAPSULE_ASSIGN_OR_RETURN(std::string text, Post("/v3/lease/grant", JsonText(body)));
  CAPSULE_ASSIGN_OR_RETURN(Json reply, ParseReply(text, "etcd lease grant"));
  int64_t id = Int(reply, "ID");
  if (id == 0) return Status::Unavailable("etcd lease grant", "no lease granted: " + reply.value("error", text));
  return id;
}

Result<int64_t> EtcdClient::KeepAlive(int64_t lease) const {
  Json body = {{"ID", std::to_string(lease)}};
  CAPSULE_ASSIGN_OR_RETURN(std::string text, Post("/v3/lease/keepalive", JsonText(body)));
  CAPSULE_ASSIGN_OR_RETURN(Json reply, ParseReply(text, "etcd lease keepalive"));
  // The gateway streams: {"result":{"ID":..,"TTL":..}}; an expired lease has no TTL (0).
  Json result = reply.contains("result") ? reply["result"] : reply;
  return Int(result, "TTL");
}

Status EtcdClient::RevokeLease(int64_t lease) const {
  Json body = {{"ID", std::to_string(lease)}};
  Result<std::string> text = Post("/v3/lease/revoke", JsonText(body));
  return text.ok() ? Status::Ok() : text.status();
}

}  // namespace capsule::fleet
