// HPKE against the RFC 9180 test vectors (DHKEM(X25519, HKDF-SHA256), HKDF-SHA256; modes base
// and psk; AEADs 1, 2, 3 and export-only), then the ways Open must fail.
#include "move/seal/hpke.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "capsule/base/sha256.h"

namespace capsule::hpke {
namespace {

using Json = nlohmann::json;

std::string Unhex(const Json& field) {
  Result<std::string> raw = HexDecode(field.get<std::string>(), "test vector");
  EXPECT_TRUE(raw.ok()) << raw.status().ToString();
  return raw.ok() ? *raw : std::string();
}

std::string Hex(std::string_view bytes) { return HexEncode(bytes); }

Json LoadVectors() {
  std::ifstream in("move/seal/testdata/rfc9180-x25519-vectors.json");
  EXPECT_TRUE(in.good()) << "test vectors not found in the runfiles";
  std::stringstream text;
  text << in.rdbuf();
  return Json::parse(text.str());
}

// Checks one published entry end to end: keys, KEM, key schedule, every ct, every export.
void CheckVector(const Json& v) {
  const Mode mode = static_cast<Mode>(v["mode"].get<int>());
  const AeadId aead = static_cast<AeadId>(v["aead_id"].get<int>());
  ASSERT_EQ(v["kem_id"].get<int>(), kKemX25519HkdfSha256);
  ASSERT_EQ(v["kdf_id"].get<int>(), kKdfHkdfSha256);
  const std::string info = Unhex(v["info"]);
  const std::string psk = v.contains("psk") ? Unhex(v["psk"]) : "";
  const std::string psk_id = v.contains("psk_id") ? Unhex(v["psk_id"]) : "";

  Result<KeyPair> recipient = DeriveKeyPair(Unhex(v["ikmR"]));
  ASSERT_TRUE(recipient.ok()) << recipient.status().ToString();
  Result<std::string> sk_r = SerializePrivateKey(recipient->private_key.get());
  ASSERT_TRUE(sk_r.ok());
  EXPECT_EQ(Hex(*sk_r), v["skRm"].get<std::string>());
  EXPECT_EQ(Hex(recipient->public_key), v["pkRm"].get<std::string>());

  Result<KeyPair> ephemeral = DeriveKeyPair(Unhex(v["ikmE"]));
  ASSERT_TRUE(ephemeral.ok());
  Result<std::string> sk_e = SerializePrivateKey(ephemeral->private_key.get());
  ASSERT_TRUE(sk_e.ok());
  EXPECT_EQ(Hex(*sk_e), v["skEm"].get<std::string>());
  EXPECT_EQ(Hex(ephemeral->public_key), v["pkEm"].get<std::string>());

  Result<Encapsulation> kem = Encap(recipient->public_key, &*ephemeral);
  ASSERT_TRUE(kem.ok()) << kem.status().ToString();
  EXPECT_EQ(Hex(kem->enc), v["enc"].get<std::string>());
  EXPECT_EQ(Hex(kem->shared_secret), v["shared_secret"].get<std::string>());
  Result<std::string> decapped = Decap(kem->enc, recipient->private_key.get());
  ASSERT_TRUE(decapped.ok());
  EXPECT_EQ(Hex(*decapped), v["shared_secret"].get<std::string>());

  Result<SenderSetup> sender =
      SetupSenderWithEphemeral(mode, recipient->public_key, info, psk, psk_id, aead, *ephemeral);
  ASSERT_TRUE(sender.ok()) << sender.status().ToString();
  EXPECT_EQ(Hex(sender->enc), v["enc"].get<std::string>());
  EXPECT_EQ(Hex(sender->context.key()), v["key"].get<std::string>());
  EXPECT_EQ(Hex(sender->context.base_nonce()), v["base_nonce"].get<std::string>());
  EXPECT_EQ(Hex(sender->context.exporter_secret()), v["exporter_secret"].get<std::string>());

  Result<Context> receiver =
      mode == Mode::kBase ? SetupBaseRecipient(sender->enc, recipient->private_key.get(), info, aead)
                          : SetupPskRecipient(sender->enc, recipient->private_key.get(), info, psk, psk_id, aead);
  ASSERT_TRUE(receiver.ok()) << receiver.status().ToString();
  EXPECT_EQ(Hex(receiver->key()), v["key"].get<std::string>());
  EXPECT_EQ(Hex(receiver->exporter_secret()), v["exporter_secret"].get<std::string>());

  for (const Json& e : v["encryptions"]) {
    Result<std::string> ct = sender->context.Seal(Unhex(e["aad"]), Unhex(e["pt"]));
    ASSERT_TRUE(ct.ok()) << ct.status().ToString();
    EXPECT_EQ(Hex(*ct), e["ct"].get<std::string>());
    Result<std::string> pt = receiver->Open(Unhex(e["aad"]), Unhex(e["ct"]));
    ASSERT_TRUE(pt.ok()) << pt.status().ToString();
    EXPECT_EQ(Hex(*pt), e["pt"].get<std::string>());
  }
  EXPECT_EQ(sender->context.sequence_number(), v["encryptions"].size());
  if (aead == AeadId::kExportOnly) {
    EXPECT_EQ(sender->context.Seal("", "x").status().code(), Code::kFailedPrecondition);
  }

  for (const Json& x : v["exports"]) {
    const std::string exporter_context = Unhex(x["exporter_context"]);
    const size_t length = x["L"].get<size_t>();
    Result<std::string> from_sender = sender->context.Export(exporter_context, length);
    Result<std::string> from_receiver = receiver->Export(exporter_context, length);
    ASSERT_TRUE(from_sender.ok() && from_receiver.ok());
    EXPECT_EQ(Hex(*from_sender), x["exported_value"].get<std::string>());
    EXPECT_EQ(Hex(*from_receiver), x["exported_value"].get<std::string>());
  }
}

TEST(HpkeTest, Rfc9180Vectors) {
  Json vectors = LoadVectors();
  ASSERT_TRUE(vectors.is_array());
  int checked = 0;
  bool saw_envelope_suite = false;
  for (const Json& v : vectors) {
    SCOPED_TRACE("mode " + std::to_string(v["mode"].get<int>()) + " aead " +
                 std::to_string(v["aead_id"].get<int>()));
    CheckVector(v);
    ++checked;
    if (v["mode"] == 0 && v["aead_id"] == 2) saw_envelope_suite = v["encryptions"].size() == 257;
  }
  EXPECT_EQ(checked, 8);  // every entry of the file: modes 0 and 1, AEADs 1, 2, 3, 65535
  EXPECT_TRUE(saw_envelope_suite);
}

// A fresh pair and a sealed message, for the negative tests.
struct Fixture {
  KeyPair recipient;
  SenderSetup sender;
};

Fixture MakeFixture() {
  Result<KeyPair> recipient = GenerateKeyPair();
  EXPECT_TRUE(recipient.ok());
  Result<SenderSetup> sender = SetupBaseSender(recipient->public_key, "info");
  EXPECT_TRUE(sender.ok());
  return Fixture{std::move(recipient).value(), std::move(sender).value()};
}

TEST(HpkeTest, RoundTripWithFreshKeys) {
  Fixture f = MakeFixture();
  Result<Context> receiver = SetupBaseRecipient(f.sender.enc, f.recipient.private_key.get(), "info");
  ASSERT_TRUE(receiver.ok());
  for (int i = 0; i < 3; ++i) {
    std::string message = "message " + std::to_string(i);
    Result<std::string> ct = f.sender.context.Seal("aad", message);
    ASSERT_TRUE(ct.ok());
    EXPECT_EQ(ct->size(), message.size() + kAeadTagSize);
    Result<std::string> pt = receiver->Open("aad", *ct);
    ASSERT_TRUE(pt.ok()) << pt.status().ToString();
    EXPECT_EQ(*pt, message);
  }
}

TEST(HpkeTest, OpenWithWrongKeyFails) {
  Fixture f = MakeFixture();
  Result<KeyPair> other = GenerateKeyPair();
  ASSERT_TRUE(other.ok());
  Result<std::string> ct = f.sender.context.Seal("", "secret");
  ASSERT_TRUE(ct.ok());
  Result<Context> wrong = SetupBaseRecipient(f.sender.enc, other->private_key.get(), "info");
  ASSERT_TRUE(wrong.ok());  // HPKE has no key confirmation: the failure shows at Open
  EXPECT_EQ(wrong->Open("", *ct).status().code(), Code::kCorruption);
}

TEST(HpkeTest, OpenWithFlippedBitFails) {
  Fixture f = MakeFixture();
  Result<std::string> ct = f.sender.context.Seal("", "secret");
  ASSERT_TRUE(ct.ok());
  for (size_t i = 0; i < ct->size(); ++i) {
    Result<Context> receiver = SetupBaseRecipient(f.sender.enc, f.recipient.private_key.get(), "info");
    ASSERT_TRUE(receiver.ok());
    std::string bad = *ct;
    bad[i] ^= 0x01;
    Result<std::string> pt = receiver->Open("", bad);
    EXPECT_EQ(pt.status().code(), Code::kCorruption) << "byte " << i;
    EXPECT_EQ(receiver->sequence_number(), 0u);  // a failed Open does not advance
    EXPECT_TRUE(receiver->Open("", *ct).ok());
  }
}

TEST(HpkeTest, OpenWithWrongAadInfoOrOrderFails) {
  Fixture f = MakeFixture();
  Result<std::string> first = f.sender.context.Seal("aad", "one");
  Result<std::string> second = f.sender.context.Seal("aad", "two");
  ASSERT_TRUE(first.ok() && second.ok());
  Result<Context> receiver = SetupBaseRecipient(f.sender.enc, f.recipient.private_key.get(), "info");
  ASSERT_TRUE(receiver.ok());
  EXPECT_EQ(receiver->Open("AAD", *first).status().code(), Code::kCorruption);
  EXPECT_EQ(receiver->Open("aad", *second).status().code(), Code::kCorruption);  // out of order
  EXPECT_TRUE(receiver->Open("aad", *first).ok());
  Result<Context> other_info = SetupBaseRecipient(f.sender.enc, f.recipient.private_key.get(), "infO");
  ASSERT_TRUE(other_info.ok());
  EXPECT_EQ(other_info->Open("aad", *first).status().code(), Code::kCorruption);
  EXPECT_EQ(receiver->Open("aad", std::string(kAeadTagSize - 1, 'x')).status().code(), Code::kCorruption);
}

TEST(HpkeTest, RolesAreKeptApart) {
  Fixture f = MakeFixture();
  Result<Context> receiver = SetupBaseRecipient(f.sender.enc, f.recipient.private_key.get(), "info");
  ASSERT_TRUE(receiver.ok());
  EXPECT_EQ(receiver->Seal("", "x").status().code(), Code::kFailedPrecondition);
  Result<std::string> ct = f.sender.context.Seal("", "x");
  ASSERT_TRUE(ct.ok());
  EXPECT_EQ(f.sender.context.Open("", *ct).status().code(), Code::kFailedPrecondition);
}

TEST(HpkeTest, SequenceNumberOverflowIsRefused) {
  Fixture f = MakeFixture();
  f.sender.context.SetSequenceNumberForTesting(UINT64_MAX - 1);
  EXPECT_TRUE(f.sender.context.Seal("", "last").ok());
  EXPECT_EQ(f.sender.context.sequence_number(), UINT64_MAX);
  Result<std::string> refused = f.sender.context.Seal("", "one too many");
  EXPECT_EQ(refused.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("message limit"), std::string::npos);
}

TEST(HpkeTest, PskInputsAreChecked) {
  Fixture f = MakeFixture();
  EXPECT_EQ(SetupPskSender(f.recipient.public_key, "info", "psk", "").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(SetupPskSender(f.recipient.public_key, "info", "", "").status().code(), Code::kInvalidArgument);
  Result<SenderSetup> psk_sender = SetupPskSender(f.recipient.public_key, "info", "psk", "id");
  ASSERT_TRUE(psk_sender.ok());
  Result<std::string> ct = psk_sender->context.Seal("", "x");
  ASSERT_TRUE(ct.ok());
  Result<Context> wrong_psk =
      SetupPskRecipient(psk_sender->enc, f.recipient.private_key.get(), "info", "PSK", "id");
  ASSERT_TRUE(wrong_psk.ok());
  EXPECT_EQ(wrong_psk->Open("", *ct).status().code(), Code::kCorruption);
  Result<Context> right_psk =
      SetupPskRecipient(psk_sender->enc, f.recipient.private_key.get(), "info", "psk", "id");
  ASSERT_TRUE(right_psk.ok());
  EXPECT_TRUE(right_psk->Open("", *ct).ok());
}

TEST(HpkeTest, SingleShot) {
  Fixture f = MakeFixture();
  Result<SealedMessage> sealed = SealBase(f.recipient.public_key, "info", "aad", "stream key");
  ASSERT_TRUE(sealed.ok());
  EXPECT_EQ(sealed->enc.size(), kEncSize);
  Result<std::string> opened = OpenBase(sealed->enc, f.recipient.private_key.get(), "info", "aad", sealed->ciphertext);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(*opened, "stream key");
  std::string bad_enc = sealed->enc;
  bad_enc[3] ^= 0x40;
  EXPECT_FALSE(OpenBase(bad_enc, f.recipient.private_key.get(), "info", "aad", sealed->ciphertext).ok());
}

TEST(HpkeTest, BadPublicKeysAreRefused) {
  EXPECT_EQ(SetupBaseSender(std::string(31, 'x'), "info").status().code(), Code::kInvalidArgument);
  // The all-zero point gives an all-zero shared secret, which section 7.1.4 refuses.
  EXPECT_FALSE(SetupBaseSender(std::string(32, '\0'), "info").ok());
}

}  // namespace
}  // namespace capsule::hpke
