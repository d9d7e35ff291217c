// café: a Latin-1 comment
func.func @f() {
  func.return
}
