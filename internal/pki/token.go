package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
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
// cluster. A token cannot be revoked before it expires (rotating the CA
// aside), so issue short-lived ones.

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
	t := jwt.NewWithClaims(method, tokenClaims{jwt.RegisteredClaims{
		Issuer: ca.Cluster(), Subject: id.URI().String(),
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

// VerifyToken checks a token against the CA certificates cas (any of
// them may have signed it) at now and returns the identity it names. The
// token must name the cluster cas record.
func VerifyToken(token string, cas []*x509.Certificate, now time.Time) (Identity, error) {
	id, _, err := VerifyTokenExpiry(token, cas, now)
	return id, err
}

// VerifyTokenExpiry is VerifyToken, also returning when the token expires.
func VerifyTokenExpiry(token string, cas []*x509.Certificate, now time.Time) (Identity, time.Time, error) {
	var keys jwt.VerificationKeySet
	for _, c := range cas {
		keys.Keys = append(keys.Keys, c.PublicKey)
	}
	var claims tokenClaims
	_, err := jwt.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) { return keys, nil },
		jwt.WithValidMethods([]string{"ES256", "ES384", "EdDSA", "RS256"}), jwt.WithExpirationRequired(), jwt.WithStrictDecoding(),
		jwt.WithTimeFunc(func() time.Time { return now }))
	if err != nil {
		return Identity{}, time.Time{}, fmt.Errorf("%w: %w", ErrBadToken, err)
	}
	issuer := false
	for _, c := range cas {
		issuer = issuer || ClusterOf(c) == claims.Issuer
	}
	if !issuer {
		return Identity{}, time.Time{}, fmt.Errorf("%w: issued for cluster %q, not this one", ErrBadToken, claims.Issuer)
	}
	role, name, ok := strings.Cut(strings.TrimPrefix(claims.Subject, URIScheme+"://"), "/")
	id := Identity{Role: Role(role), Name: name}
	if !ok || !strings.HasPrefix(claims.Subject, URIScheme+"://") || id.Validate() != nil {
		return Identity{}, time.Time{}, fmt.Errorf("%w: subject %q is no identity", ErrBadToken, claims.Subject)
	}
	return id, claims.ExpiresAt.Time, nil
}
