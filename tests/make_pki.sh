#!/bin/bash
# Writes a throwaway PKI for tests, demos and benchmarks of the sidecar transport:
#   ca.pem ca.key              the CA both sidecars trust
#   server.pem server.key      CN=sidecar-a, signed by the CA
#   client.pem client.key      CN=sidecar-b, signed by the CA
#   rogue-ca.pem rogue-ca.key  a second CA nobody trusts
#   rogue.pem rogue.key        CN=sidecar-a, signed by the rogue CA (same name, wrong CA)
#   expired.pem expired.key    CN=sidecar-b, signed by the CA, expired a day ago
#   server-only.pem .key       CN=sidecar-c, signed by the CA, for TLS server use only
# Keys are EC P-256 (ECDSA works for TLS 1.3 on both ends in every OpenSSL 3.0); certificates
# are valid for 2 days. Never use these outside tests: the keys are unencrypted.
# Usage: tests/make_pki.sh OUTDIR
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
out=$1
mkdir -p "$out"
cd "$out"

days=2
# A configuration of our own so that the system's openssl.cnf adds no extensions of its own.
config=$(mktemp)
trap 'rm -f "$config"' EXIT
printf '%s\n' '[req]' 'distinguished_name = dn' 'prompt = no' '[dn]' > "$config"

# new_cert NAME CN ISSUER EXTENSIONS...: a P-256 key NAME.key and certificate NAME.pem, signed
# by ISSUER ("self" for a CA), one openssl run each so that the whole PKI takes well under 1 s.
new_cert() {
  local name=$1 cn=$2 issuer=$3
  shift 3
  local signer=()
  [[ $issuer != self ]] && signer=(-CA "$issuer.pem" -CAkey "$issuer.key")
  local ext=()
  for e in "$@"; do ext+=(-addext "$e"); done
  openssl req -config "$config" -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$name.key" -subj "/CN=$cn" -days "$days" -sha256 "${signer[@]}" "${ext[@]}" \
    -out "$name.pem" 2>/dev/null
  chmod 600 "$name.key"
}

new_ca() {
  new_cert "$1" "$2" self "basicConstraints=critical,CA:TRUE" \
    "keyUsage=critical,keyCertSign,cRLSign" "subjectKeyIdentifier=hash"
}

# Usable for both client and server authentication, so that either sidecar may hold any.
new_leaf() {
  new_cert "$1" "$2" "$3" "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth,clientAuth" \
    "subjectAltName=DNS:$2"
}

# A leaf whose validity ended a day ago (openssl req refuses negative days; x509 takes them).
new_expired() {
  openssl req -config "$config" -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$1.key" -subj "/CN=$2" -out "$1.csr" 2>/dev/null
  chmod 600 "$1.key"
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -set_serial "$RANDOM$RANDOM" \
    -days -1 -sha256 -out "$1.pem" 2>/dev/null
  rm -f "$1.csr"
}

# run_all "CMD ARGS" ...: runs each in the background and fails if any fails. The two CAs
# first, then every leaf at once: the whole PKI in two rounds of openssl runs.
run_all() {
  local pids=()
  for command in "$@"; do
    eval "$command" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
}

run_all 'new_ca ca "capsulefs test CA"' 'new_ca rogue-ca "rogue CA"'
run_all 'new_leaf server sidecar-a ca' \
  'new_leaf client sidecar-b ca' \
  'new_leaf rogue sidecar-a rogue-ca' \
  'new_expired expired sidecar-b ca' \
  'new_cert server-only sidecar-c ca "basicConstraints=critical,CA:FALSE" \
     "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth"'
