// Package gpukube builds gpu.Node values from Kubernetes Node objects, so
// that package gpu itself stays free of Kubernetes types.
package gpukube
