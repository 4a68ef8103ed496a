// Package auth implements NVMe in-band authentication with DH-HMAC-CHAP
// (NVMe Base Specification 2.0 §8.13, TP 8006) as the Linux kernel speaks
// it: secrets in the DHHC-1 representation, the hash and Diffie-Hellman
// group identifiers, typed views over the AUTH_Negotiate and
// DH-HMAC-CHAP_* messages, finite-field Diffie-Hellman over the RFC 7919
// groups, and two transport-neutral state machines: Controller (the target
// side of one queue) and Host (the initiator side).
//
// The package knows nothing about capsules: the caller moves the message
// bytes in Authentication Send (host to controller) and Authentication
// Receive (controller to host) commands, with SECP 0xE9 and SPSP0 = SPSP1 =
// 0x01.
//
// Secrets never leave the package in printable form: Key formats as
// "[redacted]" with %v, %s, %q, %x and %#v; Key.Encode is the one way to get
// the DHHC-1 text back.
package auth
