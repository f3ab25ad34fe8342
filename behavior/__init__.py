"""refract.behavior"""
