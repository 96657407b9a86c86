// Package schema holds the value types shared by every document users
// write: pipeline specs (package pipeline), endpoint specs (package
// inference) and GPU policies (package gpu). A Duration is written the
// same way in all of them, so are Kubernetes pod settings (Pod: a step's,
// a Ray group's, an endpoint's replicas'), and every validator reports
// what is wrong the same way: a Problem per finding, located by a JSON path, all of them at
// once in a ValidationError.
//
// It sits below every domain package and imports nothing of Atelier.
package schema
