package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Bearer tokens let an operator's browser or a Prometheus server reach a
// member's HTTP listener without a client certificate. A token is a JWT
// signed with the cluster CA's key (`neptune tls token create`, run where
// ca-key.pem is, like `neptune tls cert create`) and verified against the
// CA certificates every member already has: no new secret to distribute.
// Its subject is the identity URI, neptune://<role>/<name>, its issuer the
// cluster, its id (jti) random. A token is revoked before it expires by
// listing its id in the revocation file (revoke.go), which members
// re-read as they re-read their certificates.

// DefaultTokenValidity is how long a token is valid unless asked.
const DefaultTokenValidity = 24 * time.Hour

// tokenClaims are a token's claims; subject is the identity URI.
type tokenClaims struct {
	jwt.RegisteredClaims
}

// ErrBadToken wraps every reason a token is refused.
var ErrBadToken = errors.New("pki: token refused")

// IssueToken signs a token for id valid for validFor (0: the default)
// from now, never beyond the CA.
func (ca *CA) IssueToken(id Identity, validFor time.Duration, now time.Time) (string, error) {
	if err := id.Validate(); err != nil {
		return "", err
	}
	if validFor <= 0 {
		validFor = DefaultTokenValidity
	}
	exp := now.Add(validFor)
	if exp.After(ca.Cert.NotAfter) {
		exp = ca.Cert.NotAfter
	}
	method, err := signingMethod(ca.Key.Public())
	if err != nil {
		return "", err
	}
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("pki: token id: %w", err)
	}
	t := jwt.NewWithClaims(method, tokenClaims{jwt.RegisteredClaims{
		ID: hex.EncodeToString(raw[:]), Issuer: ca.Cluster(), Subject: id.URI().String(),
		IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now.Add(-time.Minute)), ExpiresAt: jwt.NewNumericDate(exp),
	}})
	return t.SignedString(ca.Key)
}

func signingMethod(pub crypto.PublicKey) (jwt.SigningMethod, error) {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve.Params().BitSize {
		case 256:
			return jwt.SigningMethodES256, nil
		case 384:
			return jwt.SigningMethodES384, nil
		}
	case ed25519.PublicKey:
		return jwt.SigningMethodEdDSA, nil
	case *rsa.PublicKey:
		return jwt.SigningMethodRS256, nil
	}
	return nil, fmt.Errorf("pki: a CA key of type %T cannot sign tokens", pub)
}

// Token is what a verified token says.
type Token struct {
	// ID is its jti, what revokes it; "" for a token issued before
	// tokens had one, which cannot be revoked.
	ID       string
	Identity Identity
	Expires  time.Time
}

// VerifyToken checks a token against the CA certificates cas (any of
// them may have signed it) at now and returns the identity it names. The
// token must name the cluster cas record. It does not know of
// revocations: a member checks tokens with Source.VerifyToken.
func VerifyToken(token string, cas []*x509.Certificate, now time.Time) (Identity, error) {
	t, err := verifyToken(token, cas, now, true)
	return t.Identity, err
}

// InspectToken is VerifyToken without the time checks: what a token
// signed by one of cas says, expired or not (for revoking it).
func InspectToken(token string, cas []*x509.Certificate) (Token, error) {
	return verifyToken(token, cas, time.Time{}, false)
}

func verifyToken(token string, cas []*x509.Certificate, now time.Time, timed bool) (Token, error) {
	var keys jwt.VerificationKeySet
	for _, c := range cas {
		keys.Keys = append(keys.Keys, c.PublicKey)
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods([]string{"ES256", "ES384", "EdDSA", "RS256"}), jwt.WithStrictDecoding()}
	if timed {
		opts = append(opts, jwt.WithExpirationRequired(), jwt.WithTimeFunc(func() time.Time { return now }))
	} else {
		opts = append(opts, jwt.WithoutClaimsValidation())
	}
	var claims tokenClaims
	if _, err := jwt.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) { return keys, nil }, opts...); err != nil {
		return Token{}, fmt.Errorf("%w: %w", ErrBadToken, err)
	}
	issuer := false
	for _, c := range cas {
		issuer = issuer || ClusterOf(c) == claims.Issuer
	}
	if !issuer {
		return Token{}, fmt.Errorf("%w: issued for cluster %q, not this one", ErrBadToken, claims.Issuer)
	}
	role, name, ok := strings.Cut(strings.TrimPrefix(claims.Subject, URIScheme+"://"), "/")
	id := Identity{Role: Role(role), Name: name}
	if !ok || !strings.HasPrefix(claims.Subject, URIScheme+"://") || id.Validate() != nil {
		return Token{}, fmt.Errorf("%w: subject %q is no identity", ErrBadToken, claims.Subject)
	}
	t := Token{ID: claims.ID, Identity: id}
	if claims.ExpiresAt != nil {
		t.Expires = claims.ExpiresAt.Time
	}
	return t, nil
}
