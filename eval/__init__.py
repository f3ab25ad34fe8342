"""refract.eval"""
