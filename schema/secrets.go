package schema

import "regexp"

// SecretNamePattern is what a project secret's name looks like, wherever a
// document references one (pipeline steps, endpoint specs) and in REST.
const SecretNamePattern = `^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`

var secretNameRE = regexp.MustCompile(SecretNamePattern)

// ValidSecretName reports whether name may name a secret.
func ValidSecretName(name string) bool { return secretNameRE.MatchString(name) }
