# NVMe in-band authentication (DH-HMAC-CHAP, NVMe base 2.0 section 8.13),
# as the kernel target's hosts/<nqn>/dhchap_* attributes: every queue of
# the host authenticates before it may do anything else; a host without
# the key, or with another, is refused at Fabrics Connect.
#
# THE KEYS BELOW ARE EXAMPLES, PUBLISHED HERE: make your own with
#   nvmeof gen-dhchap-key        (or nvme gen-dhchap-key)
# and prefer dhchap_key_file (a file of mode 0600) to a key in this file.
#
#   sudo nvmetd --config examples/auth.hcl
#   nvmeof connect -t rdma -a 127.0.0.1 -n nqn.2026-11.io.nvmeof:auth \
#       -q nqn.2014-08.org.nvmexpress:uuid:1b4e28ba-2fa1-4d2e-883f-0016d3cca427 \
#       --dhchap-secret DHHC-1:00:k1Bw5gFujnudpuhX675uDEvIrtSXAJgndycpxLQxikCmMjVH: \
#       --dhchap-ctrl-secret DHHC-1:00:n2A2TINV7Hh1zzKgznhdcmpBPRFmJmSNN9QN6EjvhGMG7Y1K:

port "p0" {
  address = "127.0.0.1"
  service = 4420
}

host "nqn.2014-08.org.nvmexpress:uuid:1b4e28ba-2fa1-4d2e-883f-0016d3cca427" {
  # dhchap_key: the host's secret (DHHC-1 representation); or
  # dhchap_key_file = "host.key", read at load.
  dhchap_key = "DHHC-1:00:k1Bw5gFujnudpuhX675uDEvIrtSXAJgndycpxLQxikCmMjVH:"
  # dhchap_ctrl_key: the controller's secret, for bidirectional
  # authentication, where the host checks the target too; or
  # dhchap_ctrl_key_file. Leave it out for the host-only check.
  dhchap_ctrl_key = "DHHC-1:00:n2A2TINV7Hh1zzKgznhdcmpBPRFmJmSNN9QN6EjvhGMG7Y1K:"
  # dhchap_hash: hmac(sha256) (default), hmac(sha384) or hmac(sha512).
  dhchap_hash = "hmac(sha256)"
  # dhchap_dhgroup: "null" (default: no Diffie-Hellman) or one of
  # ffdhe2048 ffdhe3072 ffdhe4096 ffdhe6144 ffdhe8192: a fresh session
  # key each time, costlier.
  dhchap_dhgroup = "ffdhe2048"
}

subsystem "nqn.2026-11.io.nvmeof:auth" {
  ports         = ["p0"]
  allowed_hosts = ["nqn.2014-08.org.nvmexpress:uuid:1b4e28ba-2fa1-4d2e-883f-0016d3cca427"]

  namespace "1" {
    backend = "memory"
    size    = "64MiB"
  }
}
