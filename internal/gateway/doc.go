// Package gateway is Neptune's HTTP front door (issue 12): it exposes
// services over HTTP/1.1 and HTTP/2 and keeps each subscriber's guaranteed
// request rate with the Gage cores of internal/gage.
package gateway
