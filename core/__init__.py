"""refract.core"""
